/**
 * Background write failures: `node:fs` is wrapped so a test can make `write` or `fsync` fail
 * (as a full disk would) after the file has been created.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { UnknownError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { readEvents } from "./decoder.js";

const failures = vi.hoisted(() => ({ write: false, fsync: false }));

vi.mock("node:fs", async (importOriginal) => {
  const fs = await importOriginal<typeof import("node:fs")>();
  const enospc = (): NodeJS.ErrnoException =>
    Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
  return {
    ...fs,
    write: ((...args: unknown[]) => {
      const cb = args[args.length - 1] as (e: Error | null, n?: number) => void;
      if (failures.write) {
        process.nextTick(() => cb(enospc()));
        return;
      }
      (fs.write as (...a: unknown[]) => void)(...args);
    }) as typeof fs.write,
    fsync: ((fd: number, cb: (e: Error | null) => void) => {
      if (failures.fsync) {
        process.nextTick(() => cb(enospc()));
        return;
      }
      fs.fsync(fd, cb);
    }) as typeof fs.fsync,
  };
});

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "writer-errors-"));
  failures.write = false;
  failures.fsync = false;
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("EventFileWriter: background write errors are never lost", () => {
  it("emits the error on errors$ and onError, and the next flush() and close() reject with it", async () => {
    const seen: Error[] = [];
    const callback: Error[] = [];
    const w = new SummaryWriter(dir, {
      clock: new VirtualClock(),
      logger: silentLogger,
      onError: (e) => callback.push(e),
    });
    w.errors$.subscribe((e) => seen.push(e));
    await w.flush();
    failures.write = true;
    w.addScalar("x", 1, 1); // does not throw: the failure happens in the background
    const flushed = w.flush();
    await expect(flushed).rejects.toThrow(UnknownError);
    await expect(flushed).rejects.toThrow(/writing event file .*events\.out\.tfevents.* failed: ENOSPC/);
    expect(seen).toHaveLength(1);
    expect(callback).toEqual(seen);
    expect((seen[0] as Error & { cause?: { code?: string } }).cause?.code).toBe("ENOSPC");
    expect(w.error).toBe(seen[0]);
    // The error is sticky: later records are dropped and every flush/close reports it.
    failures.write = false;
    w.addScalar("x", 2, 2);
    await expect(w.flush()).rejects.toBe(seen[0]);
    await expect(w.close()).rejects.toBe(seen[0]);
    expect(readEvents(w.path).filter((e) => e.summary)).toHaveLength(0);
  });

  it("reports an fsync failure the same way", async () => {
    const errors: Error[] = [];
    const w = new SummaryWriter(dir, { clock: new VirtualClock(), logger: silentLogger, onError: (e) => errors.push(e) });
    await w.flush();
    failures.fsync = true;
    w.addScalar("x", 1, 1);
    await expect(w.close()).rejects.toThrow(/failed: ENOSPC/);
    expect(errors).toHaveLength(1);
  });

  it("logs the error when nobody listens", async () => {
    const logged: string[] = [];
    const logger = { ...silentLogger, error: (m: string) => void logged.push(m) };
    const w = new SummaryWriter(dir, { clock: new VirtualClock(), logger });
    await w.flush();
    failures.write = true;
    w.addScalar("x", 1, 1);
    await expect(w.close()).rejects.toThrow(UnknownError);
    expect(logged).toEqual(["event file write failed; later events to this file are dropped"]);
  });

  it("an onError callback that throws is logged with its error; the write error still reaches errors$ and close()", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const w = new SummaryWriter(dir, {
      clock,
      logger: events.logger(() => clock.now()),
      onError: () => {
        throw new TypeError("the alerting hook is broken");
      },
    });
    const seen: Error[] = [];
    w.errors$.subscribe((e) => seen.push(e));
    await w.flush();
    failures.write = true;
    w.addScalar("x", 1, 1);
    await expect(w.close()).rejects.toThrow(UnknownError);
    expect(seen).toHaveLength(1);
    expect(events.lines("error")).toEqual([
      { type: "log", time: clock.now(), level: "error", message: "event file write failed; later events to this file are dropped", fields: { path: w.path, error: "ENOSPC: no space left on device, write" } },
      { type: "log", time: clock.now(), level: "error", message: "onError callback threw", fields: { error: "TypeError: the alerting hook is broken" } },
    ]);
  });
});
