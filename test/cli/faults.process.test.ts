/**
 * File-system faults while training (no permission, no space): one line with the path and the
 * fix, exit 1, the stack only with --verbose. The faults are real: a directory made read-only
 * under an unprivileged user (setpriv), and a full size-limited tmpfs.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { describeFault, failureMessage } from "../../src/cli/faults.js";
import { linearJob, spawnResult } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-faults-");

const fsError = (code: string, path: string): NodeJS.ErrnoException => Object.assign(new Error(`${code}: failed, open '${path}'`), { code, path });

describe("describeFault and failureMessage", () => {
  it("name the path and the fix for EACCES and ENOSPC, also when wrapped as a cause", () => {
    expect(describeFault(fsError("EACCES", "/r/ckpt/x.tmp"))).toMatch(/^permission denied writing \/r\/ckpt\/x\.tmp \(EACCES\): make the directory writable/);
    const wrapped = new Error("checkpoint save failed", { cause: fsError("ENOSPC", "/r/ckpt/y") });
    expect(describeFault(wrapped)).toMatch(/^no space left on the device writing \/r\/ckpt\/y \(ENOSPC\): free space there/);
    expect(describeFault(new Error("other"))).toBeUndefined();
  });

  it("is one line unless verbose", () => {
    const e = fsError("ENOSPC", "/r/ckpt/y");
    expect(failureMessage(e, false).trimEnd().split("\n")).toHaveLength(1);
    expect(failureMessage(new TypeError("bad"), false)).toBe("Training failed: TypeError: bad (--verbose shows the stack trace)\n");
    expect(failureMessage(e, true)).toMatch(/\n\s+at /);
  });
});

const isRoot = process.getuid?.() === 0;
const hasSetpriv = spawnSync("setpriv", ["--version"]).status === 0;

describe("monitored-session run: faults while training", () => {
  it.skipIf(!isRoot || !hasSetpriv)("EACCES: the checkpoint directory becomes read-only mid-run (as nobody): one line, exit 1", async () => {
    const dir = tempDir();
    chmodSync(dir, 0o777);
    const ckpt = join(dir, "ckpt");
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\ncheckpoint: { dir: ckpt, saveSteps: 5 }\nsummaries: { dir: logs }\nlastStep: 20\nlogStepCountSteps: 0\n`, { mode: 0o644 });
    const run = (verbose: boolean) =>
      spawnResult(
        "setpriv",
        ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "--import", "tsx", "src/cli/main.ts", "run", ...(verbose ? ["--verbose"] : []), join(dir, "c.yaml")],
        { env: { ...process.env, CI: "true", HOME: dir, CLI_TEST_FAULT_AT_STEP: "7", CLI_TEST_FAULT: `readonly:${ckpt}` } },
      );
    const r = await run(false);
    expect(r.code, r.stderr).toBe(1);
    const failed = r.stderr.split("\n").filter((l) => l.startsWith("Training failed"));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatch(new RegExp(`^Training failed: permission denied writing ${ckpt}/\\S+ \\(EACCES\\): make the directory writable by this user \\(chmod/chown\\)`));
    expect(r.stderr).not.toMatch(/^\s+at /m);

    chmodSync(ckpt, 0o777); // writable again for the start of the next run
    const v = await run(true);
    expect(v.code).toBe(1);
    expect(v.stderr).toMatch(/^\s+at /m);
  });

  describe("ENOSPC on a real, size-limited tmpfs", () => {
    let mnt: string | undefined;
    beforeAll(() => {
      const m = mkdtempSync(join(tmpdir(), "ms-tmpfs-"));
      const r = spawnSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", m]);
      if (r.status === 0) mnt = m;
      else {
        rmdirSync(m);
        console.warn(`SKIPPED the ENOSPC test: mounting a tmpfs is not permitted here (${r.stderr.toString().trim() || `mount exited ${r.status}`})`);
      }
    });
    afterAll(() => {
      if (mnt === undefined) return;
      spawnSync("umount", ["-l", mnt]);
      rmdirSync(mnt);
    });

    const fillMidRun = async (yaml: (dir: string, mnt: string) => string): Promise<string> => {
      const dir = tempDir();
      const m = mnt as string;
      writeFileSync(join(dir, "c.yaml"), yaml(dir, m));
      const filler = join(m, "filler");
      try {
        const r = await spawnResult(process.execPath, ["--import", "tsx", "src/cli/main.ts", "run", join(dir, "c.yaml")], {
          env: { ...process.env, CI: "true", CLI_TEST_FAULT_AT_STEP: "7", CLI_TEST_FAULT: `fill:${filler}` },
        });
        expect(r.code, r.stderr).toBe(1);
        expect(r.stderr).not.toMatch(/^\s+at /m);
        const failed = r.stderr.split("\n").filter((l) => l.startsWith("Training failed"));
        expect(failed, r.stderr).toHaveLength(1);
        return failed[0] as string;
      } finally {
        rmSync(filler, { force: true });
      }
    };

    it("a checkpoint fills the file system mid-run: one line naming the file and the fix, exit 1", async (ctx) => {
      if (mnt === undefined) return ctx.skip();
      const ckpt = join(mnt, "ckpt");
      const line = await fillMidRun((dir, m) => `module: ${linearJob}\ncheckpoint: { dir: ${join(m, "ckpt")}, saveSteps: 5 }\nsummaries: { dir: ${join(dir, "logs")} }\nlastStep: 20\nlogStepCountSteps: 0\n`);
      expect(line).toMatch(new RegExp(`^Training failed: no space left on the device writing ${ckpt}/\\S+ \\(ENOSPC\\): free space there`));
    });

    it("an event file fills the file system mid-run: the same, naming the event file", async (ctx) => {
      if (mnt === undefined) return ctx.skip();
      const logs = join(mnt, "logs");
      const line = await fillMidRun((dir, m) => `module: ${linearJob}\ncheckpoint: { dir: ${join(dir, "ckpt")}, saveSteps: 1000 }\nsummaries: { dir: ${join(m, "logs")} }\nlastStep: 2000\nlogStepCountSteps: 1\n`);
      expect(line).toMatch(new RegExp(`^Training failed: no space left on the device writing ${logs}/events\\.out\\.tfevents\\.\\S+ \\(ENOSPC\\)`));
    });
  });
});
