/**
 * The entry point's report of an error nothing caught (child processes): one line,
 * `monitored-session: <error>`, and exit 1; the stack with `--verbose`. On the `wasm` backend too,
 * whose Emscripten glue would otherwise make Node exit 7 and print its minified source.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { repoRoot, runCli, type CliRun } from "../util/runCli.js";
import { useTempDirs } from "../util/tempDirs.js";

const job = join(repoRoot, "test/fixtures/cli/escaping-error-job.ts");
const newDir = useTempDirs("ms-cli-main-");

/** `run` on the failing job with `tfjs.backend: wasm`; `ESCAPE` says how it fails (see the job). */
const runFailing = async (escape: "throw" | "reject" | "step", flags: readonly string[] = []): Promise<CliRun> => {
  const config = join(newDir(), "train.yaml");
  await writeFile(config, `module: ${job}\ncheckpoint: { dir: ckpt, saveSteps: 2 }\nlastStep: 10\nlogStepCountSteps: 0\ntfjs:\n  backend: wasm\n`);
  return runCli(["run", ...flags, config], { env: { ESCAPE: escape } });
};

const stackLines = (s: string): string[] => s.split("\n").filter((l) => /^\s+at /.test(l));

describe("an error nothing caught, on the wasm backend", () => {
  it.each(["throw", "reject"] as const)("%s: one line naming it, exit 1 (not 7), no stack", async (escape) => {
    const r = await runFailing(escape);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain("TensorFlow.js backend: wasm (1 thread).");
    expect(r.stderr.split("\n").filter((l) => l.includes("boom"))).toEqual(["monitored-session: Error: boom (--verbose shows the stack trace)"]);
    expect(stackLines(r.stderr)).toEqual([]);
    expect(r.stderr).not.toContain("WasmBackendModule");
    expect(Buffer.byteLength(r.stderr)).toBeLessThan(5000);
  });

  it("--verbose: the line, then the error's stack", async () => {
    const r = await runFailing("throw", ["--verbose"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain("monitored-session: Error: boom\nError: boom\n");
    expect(stackLines(r.stderr)[0]).toContain("escaping-error-job.ts");
  });

  it("a failure of a step: run's one line, exit 1", async () => {
    const r = await runFailing("step");
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr.split("\n").filter((l) => l.includes("boom"))).toEqual(["Training failed: Error: boom (--verbose shows the stack trace)"]);
    expect(stackLines(r.stderr)).toEqual([]);
  });
});
