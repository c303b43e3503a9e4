/**
 * A process where a worker thread cannot start (a container's thread limit, say): the writer
 * thread's jobs run on the calling thread instead, as durably, and warming it up never throws.
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";

import { useTempDirs } from "../util/tempDirs.js";

const attempts = vi.hoisted(() => ({ count: 0 }));

vi.mock("node:worker_threads", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:worker_threads")>();
  class FailingWorker {
    constructor() {
      attempts.count += 1;
      throw Object.assign(new Error("ERR_WORKER_INIT_FAILED: Worker initialization failure: EAGAIN"), { code: "ERR_WORKER_INIT_FAILED" });
    }
  }
  return { ...actual, default: { ...actual, Worker: FailingWorker }, Worker: FailingWorker };
});

const tempDir = useTempDirs("ms-filejobs-fallback-");

describe("the writer thread, where no worker can start", () => {
  it("runs every job on the calling thread, trying to start a worker once", async () => {
    const { workerCommitter } = await import("../../src/checkpoint/internal/fileJobs.js");
    const committer = workerCommitter();
    expect(() => committer.warm()).not.toThrow();
    const dir = tempDir();
    for (const name of ["a", "b"]) {
      const result = await committer.run({
        steps: [
          { op: "write", tmp: join(dir, `${name}.tmp`), path: join(dir, name), bytes: Uint8Array.of(1, 2) },
          { op: "syncWritten" },
          { op: "rename", from: join(dir, `${name}.tmp`), to: join(dir, name) },
          { op: "fsyncDir", dir },
        ],
      });
      expect(result).toEqual({ done: 4, warnings: [], syncs: { files: 1, directories: 1 } });
      expect([...readFileSync(join(dir, name))]).toEqual([1, 2]);
    }
    expect(attempts.count).toBe(1);
  });
});
