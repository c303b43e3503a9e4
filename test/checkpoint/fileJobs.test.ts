/**
 * The checkpoint writer thread's jobs (src/checkpoint/internal/fileJobs.ts): each step on the
 * real file system, through a real worker thread; failures stop the job and leave no temporary
 * file behind; a lost lock stops it before anything is renamed; a dead thread rejects its jobs
 * and the next job gets a new one. (That it holds the process open only while a job runs:
 * fileJobs.process.test.ts.)
 */

import * as fs from "node:fs";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { RuntimeError } from "../../src/errors.js";
import { inProcessCommitter, toError, workerCommitter, type FileCommitter, type FileStep } from "../../src/checkpoint/internal/fileJobs.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-filejobs-");
const thread = workerCommitter();
afterAll(() => thread.stop());

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

/** A write step of `bytes` to `tmp`, for the file `tmp` names without its `.tmp…` suffix. */
const write = (tmp: string, data: Uint8Array): FileStep => ({ op: "write", tmp, path: tmp.replace(/\.tmp[^/]*$/, ""), bytes: data });

describe.each<[string, FileCommitter]>([
  ["on a worker thread", thread],
  ["on the calling thread", inProcessCommitter()],
])("a file job %s", (_, committer) => {
  it("writes, renames and fsyncs in order, and reports every step done", async () => {
    const dir = join(tempDir(), "a", "b");
    const steps: FileStep[] = [
      { op: "mkdir", dir },
      write(join(dir, "x.tmp-1"), bytes("first")),
      write(join(dir, "y.tmp-1"), new Uint8Array(0)),
      { op: "syncWritten" },
      { op: "rename", from: join(dir, "x.tmp-1"), to: join(dir, "x") },
      { op: "rename", from: join(dir, "y.tmp-1"), to: join(dir, "y") },
      { op: "fsyncDir", dir },
    ];
    const result = await committer.run({ steps });
    // Two files; the directory; and each directory mkdir created, in its parent (a in the
    // temporary directory, b in a).
    expect(result).toEqual({ done: steps.length, warnings: [], syncs: { files: 2, directories: 3 } });
    expect(readFileSync(join(dir, "x"), "utf8")).toBe("first");
    expect(readFileSync(join(dir, "y"), "utf8")).toBe("");
    expect(readdirSync(dir).sort()).toEqual(["x", "y"]);
  });

  it("answers jobs in the order sent, a quick one after a slow one included", async () => {
    const dir = tempDir();
    const slow = { steps: [...Array.from({ length: 8 }, (_, i) => write(join(dir, `f${i}.tmp`), new Uint8Array(64 * 1024).fill(i))), { op: "syncWritten" } as const] };
    const quick = { steps: [{ op: "mkdir", dir: join(dir, "quick") } as const] };
    const answered: string[] = [];
    await Promise.all([committer.run(slow).then(() => answered.push("slow")), committer.run(quick).then(() => answered.push("quick"))]);
    expect(answered).toEqual(["slow", "quick"]);
  });

  it("stops at the first failing step, names it, and deletes what it wrote and did not rename", async () => {
    const dir = tempDir();
    const result = await committer.run({
      steps: [
        write(join(dir, "a.tmp"), bytes("a")),
        { op: "rename", from: join(dir, "a.tmp"), to: join(dir, "a") },
        write(join(dir, "b.tmp"), bytes("b")),
        { op: "rename", from: join(dir, "missing.tmp"), to: join(dir, "c") },
        { op: "fsyncDir", dir },
      ],
    });
    expect(result.done).toBe(3);
    expect(result.error).toMatchObject({ code: "ENOENT", syscall: "rename" });
    expect(toError(result.error as NonNullable<typeof result.error>)).toMatchObject({ code: "ENOENT", message: expect.stringMatching(/ENOENT/) });
    // The renamed file stays; the written one that was never renamed is gone.
    expect(readdirSync(dir)).toEqual(["a"]);
  });

  it("never deletes a file it did not create: a temporary name that exists fails with EEXIST", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "taken.tmp"), "someone else's");
    const result = await committer.run({ steps: [write(join(dir, "taken.tmp"), bytes("mine"))] });
    expect(result).toMatchObject({ done: 0, error: { code: "EEXIST" } });
    expect(readFileSync(join(dir, "taken.tmp"), "utf8")).toBe("someone else's");
  });

  it("a lock file without the token stops the job before any rename, and reports the file's text", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "lock"), JSON.stringify({ token: "theirs", pid: 1 }));
    const steps: FileStep[] = [
      write(join(dir, "s.tmp"), bytes("state")),
      { op: "checkLock", path: join(dir, "lock"), token: "mine" },
      { op: "rename", from: join(dir, "s.tmp"), to: join(dir, "s") },
    ];
    expect(await committer.run({ steps })).toMatchObject({ done: 1, lock: JSON.stringify({ token: "theirs", pid: 1 }), warnings: [] });
    expect(readdirSync(dir)).toEqual(["lock"]);

    writeFileSync(join(dir, "lock"), "not json");
    expect(await committer.run({ steps })).toMatchObject({ done: 1, lock: "not json" });
    fs.unlinkSync(join(dir, "lock"));
    expect(await committer.run({ steps })).toMatchObject({ done: 1, lock: null });
    expect(readdirSync(dir)).toEqual([]);

    writeFileSync(join(dir, "lock"), JSON.stringify({ token: "mine" }));
    expect(await committer.run({ steps })).toMatchObject({ done: 3, warnings: [] });
    expect(readFileSync(join(dir, "s"), "utf8")).toBe("state");
  });

  it("a deletion that fails is a warning, keeps the rest of its group, and the job goes on; a missing file is nothing", async () => {
    const dir = tempDir();
    mkdirSync(join(dir, "a-directory"));
    writeFileSync(join(dir, "its-data"), "x");
    writeFileSync(join(dir, "old.index"), "x");
    writeFileSync(join(dir, "old.data"), "x");
    const result = await committer.run({
      steps: [
        // A checkpoint whose index cannot be deleted keeps its data.
        { op: "unlink", paths: [join(dir, "a-directory"), join(dir, "its-data")] },
        { op: "unlink", paths: [join(dir, "never-there"), join(dir, "old.index"), join(dir, "old.data")] },
        write(join(dir, "after.tmp"), bytes("after")),
        { op: "rename", from: join(dir, "after.tmp"), to: join(dir, "after") },
      ],
    });
    expect(result.done).toBe(4);
    expect(result.error).toBeUndefined();
    expect(result.warnings).toEqual([expect.objectContaining({ path: join(dir, "a-directory"), code: expect.stringMatching(/^E(ISDIR|PERM)$/) })]);
    expect(readdirSync(dir).sort()).toEqual(["a-directory", "after", "its-data"]);
  });

  it("a write that fails names the file it was written for, not its temporary name, and counts the fsyncs it made", async () => {
    const dir = tempDir();
    const result = await committer.run({
      steps: [write(join(dir, "ok.tmp"), bytes("ok")), { op: "syncWritten" }, { op: "fsyncDir", dir }, write(join(dir, "no-such-dir", "x.tmp"), bytes("x"))],
    });
    expect(result).toMatchObject({ done: 3, error: { code: "ENOENT", path: join(dir, "no-such-dir", "x") }, syncs: { files: 1, directories: 1 } });
    expect(readdirSync(dir)).toEqual([]);
  });

  it("an unknown step fails the job without touching anything", async () => {
    const result = await committer.run({ steps: [{ op: "format-disk" } as unknown as FileStep] });
    expect(result).toMatchObject({ done: 0, error: { message: expect.stringMatching(/unknown file step "format-disk"/) } });
  });
});

// The worker's file system is Node's own: a failing fdatasync is injected on the calling thread.
describe("a file job's round of fdatasyncs", () => {
  it("an fdatasync that fails fails the job, naming the file, after closing every file of its round; nothing written stays", async () => {
    const dir = tempDir();
    const failing = inProcessCommitter({
      ...fs,
      fdatasync: ((fd: number, cb: (e: NodeJS.ErrnoException | null) => void) =>
        fs.fstatSync(fd).size === 3 ? cb(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO", syscall: "fdatasync" })) : fs.fdatasync(fd, cb)) as typeof fs.fdatasync,
    });
    const result = await failing.run({ steps: [write(join(dir, "a.tmp"), bytes("a")), write(join(dir, "bad.tmp"), bytes("bad")), { op: "syncWritten" }, { op: "rename", from: join(dir, "a.tmp"), to: join(dir, "a") }] });
    expect(result).toMatchObject({ done: 2, error: { code: "EIO", path: join(dir, "bad") }, syncs: { files: 2 } });
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe("the order of file jobs", () => {
  it("a job sent while another waits for its fdatasyncs starts only after that one answered", async () => {
    const dir = tempDir();
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const gated = inProcessCommitter({
      ...fs,
      fdatasync: ((fd: number, cb: (e: NodeJS.ErrnoException | null) => void) => void gate.then(() => fs.fdatasync(fd, cb))) as typeof fs.fdatasync,
    });
    const job = (name: string) => ({
      steps: [write(join(dir, `${name}.tmp`), bytes(name)), { op: "syncWritten" } as const, { op: "rename", from: join(dir, `${name}.tmp`), to: join(dir, name) } as const],
    });
    const answered: string[] = [];
    const first = gated.run(job("first")).then((r) => (answered.push("first"), r));
    const second = gated.run(job("second")).then((r) => (answered.push("second"), r));
    // The first job holds at its fdatasync: the second has not written anything.
    for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    expect(readdirSync(dir)).toEqual(["first.tmp"]);
    open();
    expect(await first).toMatchObject({ done: 3 });
    expect(await second).toMatchObject({ done: 3 });
    expect(answered).toEqual(["first", "second"]);
    expect(readdirSync(dir).sort()).toEqual(["first", "second"]);
  });
});

describe("the writer thread", () => {
  it("a thread that stops rejects its running jobs with a clear error, and the next job gets a new thread", async () => {
    const own = workerCommitter();
    const dir = tempDir();
    // A job big enough to still be running when the thread is stopped, or already done: either
    // way the next job must run.
    const running = own.run({ steps: [write(join(dir, "big.tmp"), new Uint8Array(1 << 20))] });
    await own.stop();
    const outcome = await running.then(
      (r) => ({ ok: r }),
      (e: unknown) => ({ failed: e }),
    );
    if ("failed" in outcome) {
      expect(outcome.failed).toBeInstanceOf(RuntimeError);
      expect(String((outcome.failed as Error).message)).toMatch(/checkpoint writer thread stopped .* before it answered: the save is not counted/);
    }
    expect(await own.run({ steps: [{ op: "mkdir", dir: join(dir, "again") }] })).toMatchObject({ done: 1, warnings: [] });
    expect(existsSync(join(dir, "again"))).toBe(true);
    await own.stop();
  });
});
