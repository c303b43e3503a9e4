/**
 * The checkpoint writer thread in a process of its own: it holds the process open while a job
 * runs, and not once it is idle (a training script whose last act is a save exits when the save
 * is durable, never before and never hanging).
 */

import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-filejobs-");

describe("the checkpoint writer thread", () => {
  it("holds the process open while a job runs, and not once it is idle", () => {
    const dir = tempDir();
    const module = resolve("src/checkpoint/internal/fileJobs.ts");
    // The job is the only thing left to do: the process must wait for it, then exit by itself.
    const script = `
      import { sharedFileCommitter } from ${JSON.stringify(module)};
      const dir = ${JSON.stringify(dir)};
      sharedFileCommitter().run({ steps: [
        { op: "write", tmp: dir + "/done.tmp", path: dir + "/done", bytes: new Uint8Array([1, 2, 3]) },
        { op: "syncWritten" },
        { op: "rename", from: dir + "/done.tmp", to: dir + "/done" },
      ] }).then((r) => { process.stdout.write(JSON.stringify(r)); });
    `;
    // Bounded: a thread that held the process open would end in the timeout (child.error).
    const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(child.error).toBeUndefined();
    expect(child.status).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual({ done: 3, warnings: [], syncs: { files: 1, directories: 0 } });
    expect([...readFileSync(join(dir, "done"))]).toEqual([1, 2, 3]);
  });

  it("a thread started ahead of the first save (a manager that only restores, say) does not keep the process alive", () => {
    const module = resolve("src/checkpoint/internal/fileJobs.ts");
    const script = `import { sharedFileCommitter } from ${JSON.stringify(module)}; sharedFileCommitter().warm(); process.stdout.write("warm");`;
    const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(child.error).toBeUndefined();
    expect(child.status).toBe(0);
    expect(child.stdout).toBe("warm");
  });
});
