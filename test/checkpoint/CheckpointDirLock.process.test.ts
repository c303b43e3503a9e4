/**
 * The checkpoint directory lock: one writer per directory. Another process (a real child),
 * another session of this process, a dead holder (taken over), a holder on another host (a
 * lease, expired on the virtual clock), and the race of two takers.
 */
import { execFileSync, spawn } from "node:child_process";
import { readFile, readdir, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

import {
  CheckpointDirInUseError,
  CheckpointDirLock,
  CheckpointManager,
  LOCK_FILENAME,
} from "../../src/checkpoint/index.js";
import { currentProcess } from "../../src/checkpoint/CheckpointDirLock.js";
import { tensor } from "../../src/session/Tensor.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { acquire, dir, lockFile, writeLock } from "./CheckpointDirLock.testHelpers.js";

const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const child = join(root, "test/fixtures/checkpoint/lock-child.ts");

/** The pid of a process that has exited. */
const deadPid = (): number => Number(execFileSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }));

const values = () => new Map([["w", tensor("float32", [2], Float32Array.of(1, 2))]]);

describe("CheckpointDirLock", () => {
  it("a lock of a process that is gone (same host and boot) is taken over with a warning naming it", async () => {
    const pid = deadPid();
    await writeLock({ pid, startTime: "1" });
    // What a writer killed while taking or refreshing the lock leaves: removed once the lock is taken.
    await writeFile(join(dir, `${LOCK_FILENAME}.tmp-${pid}-abcdef`), "{}");
    const logger = new RecordingLogger();
    const lock = await acquire({ logger });
    expect(lock.holder.pid).toBe(process.pid);
    expect((await lockFile()).token).toBe(lock.holder.token);
    expect(logger.messages("warn")).toEqual([expect.stringMatching(new RegExp(`^Took over .*${LOCK_FILENAME} from pid ${pid} on host ${hostname()} .*process ${pid} is gone`))]);
    expect(await readdir(dir)).toEqual([LOCK_FILENAME]);
  });
});

describe("CheckpointDirLock", () => {
  it("two processes taking over one stale lock at once: exactly one wins, the other is told who", async () => {
    for (let round = 0; round < 20; round++) {
      await writeLock({ pid: deadPid(), hostname: hostname(), refreshedAtMs: 0 });
      const a = currentProcess();
      const b = { ...a, hostname: "twin" }; // another host's view: the stale lock is an expired lease
      const results = await Promise.allSettled([
        CheckpointDirLock.acquire(dir, { identity: a, logger: new RecordingLogger() }),
        CheckpointDirLock.acquire(dir, { identity: b, logger: new RecordingLogger() }),
      ]);
      const won = results.filter((r): r is PromiseFulfilledResult<CheckpointDirLock> => r.status === "fulfilled");
      expect(won, `round ${round}`).toHaveLength(1);
      const lost = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      expect(lost?.reason).toBeInstanceOf(CheckpointDirInUseError);
      const winner = (won[0] as PromiseFulfilledResult<CheckpointDirLock>).value;
      expect((lost?.reason as CheckpointDirInUseError).holder.token).toBe(winner.holder.token);
      expect((await lockFile()).token).toBe(winner.holder.token);
      await winner.release();
      expect((await readdir(dir)).filter((f) => f !== "checkpoint")).toEqual([]);
    }
  });
});

describe("a second process on a checkpoint directory in use", () => {
  it("fails before it writes anything, with one line naming the holder (a real child process)", async () => {
    const manager = await CheckpointManager.create({ directory: dir, logger: new RecordingLogger() });
    await manager.save(values(), { checkpointNumber: 1 });
    const before = new Map(await Promise.all((await readdir(dir)).map(async (f) => [f, await readFile(join(dir, f), "utf8")] as const)));
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done, fail) => {
      const p = spawn(process.execPath, ["--import", "tsx", child, dir], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      p.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
      p.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
      p.on("error", fail);
      p.on("exit", (code) => done({ code, stdout, stderr }));
    });
    expect(r.code, r.stderr).toBe(3);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(new RegExp(`^${dir} is in use by pid ${process.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d; stop that process or use another checkpoint directory\\n$`));
    const after = new Map(await Promise.all((await readdir(dir)).map(async (f) => [f, await readFile(join(dir, f), "utf8")] as const)));
    expect(after).toEqual(before);
    await manager.close();
  });
});
