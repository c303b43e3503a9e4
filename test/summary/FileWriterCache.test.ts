import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { FileWriterCache } from "../../src/summary/FileWriterCache.js";
import { eventFiles, readEvents } from "./decoder.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "writer-cache-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("FileWriterCache", () => {
  it("returns one writer per directory, however the path is spelled", async () => {
    const cache = new FileWriterCache();
    const clock = new VirtualClock();
    const a = cache.getWriter(join(dir, "run"), { clock });
    expect(cache.getWriter(join(dir, "run", "..", "run"))).toBe(a);
    const b = cache.getWriter(join(dir, "other"), { clock });
    expect(b).not.toBe(a);
    expect(cache.size).toBe(2);
    a.addScalar("x", 1, 1);
    cache.getWriter(join(dir, "run")).addScalar("x", 2, 2);
    await cache.closeAll();
    expect(cache.size).toBe(0);
    expect(a.closed && b.closed).toBe(true);
    expect(eventFiles(join(dir, "run"))).toHaveLength(1);
    expect(readEvents(a.path).filter((e) => e.summary).map((e) => e.step)).toEqual(["1", "2"]);
  });

  it("replaces a writer that was closed with a new one (a new file)", async () => {
    const cache = new FileWriterCache();
    const a = cache.getWriter(dir, { clock: new VirtualClock() });
    await a.close();
    const b = cache.getWriter(dir, { clock: new VirtualClock() });
    expect(b).not.toBe(a);
    expect(b.path).not.toBe(a.path);
    await cache.closeAll();
  });
});
