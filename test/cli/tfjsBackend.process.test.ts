/**
 * `tfjs.backend` through the `monitored-session run` command (child processes): applied before
 * the job module loads; a missing backend package exits 2 with one line naming the install
 * command, and nothing is created.
 */
import { existsSync, readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { useTempDirs } from "../util/tempDirs.js";
import { repoRoot, runCli } from "../util/runCli.js";

const backendJob = join(repoRoot, "test/fixtures/cli/backend-job.ts");
// Makes the child resolve @tensorflow/tfjs-backend-wasm as if it were not installed.
const hideWasm = ["--import", "./test/fixtures/cli/hideWasmBackend.mjs"];

const newDir = useTempDirs("ms-cli-backend-");
// The install command names the tfjs-core version in node_modules (the wasm backend must match it).
const coreVersion = (JSON.parse(readFileSync(join(repoRoot, "node_modules/@tensorflow/tfjs-core/package.json"), "utf8")) as { version: string }).version;

const writeConfig = async (dir: string, tfjs: string): Promise<string> => {
  const config = join(dir, "train.yaml");
  await writeFile(config, `module: ${backendJob}\ncheckpoint: { dir: ckpt, saveSteps: 2 }\nlastStep: 3\nlogStepCountSteps: 0\n${tfjs}`);
  return config;
};

describe("run with tfjs.backend", () => {
  it("wasm: the backend is current when the job module loads, on one thread, and the job trains", async () => {
    const dir = newDir();
    const r = await runCli(["run", await writeConfig(dir, "tfjs:\n  backend: wasm\n")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("job module loaded on backend wasm\n");
    expect(r.stderr).toContain("TensorFlow.js backend: wasm (1 thread).");
    expect(existsSync(join(dir, "ckpt", "model.ckpt-3.index"))).toBe(true);
  });

  it("cpu, and no tfjs section: the job module loads on cpu", async () => {
    const cpu = await runCli(["run", await writeConfig(newDir(), "tfjs:\n  backend: cpu\n")]);
    expect(cpu.code, cpu.stderr).toBe(0);
    expect(cpu.stderr).toContain("job module loaded on backend cpu\n");
    expect(cpu.stderr).toContain("TensorFlow.js backend: cpu (1 thread).");
    const none = await runCli(["run", await writeConfig(newDir(), "")]);
    expect(none.code, none.stderr).toBe(0);
    expect(none.stderr).toContain("job module loaded on backend cpu\n");
    expect(none.stderr).not.toContain("TensorFlow.js backend:");
  });

  it("wasm without @tensorflow/tfjs-backend-wasm installed: exit 2, one line with the install command, nothing created", async () => {
    const dir = newDir();
    const config = await writeConfig(dir, "tfjs:\n  backend: wasm\n");
    const r = await runCli(["run", config], { nodeArgs: hideWasm });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${config}: tfjs.backend: The TensorFlow.js backend "wasm" needs @tensorflow/tfjs-backend-wasm, which is not installed: run \`npm install @tensorflow/tfjs-backend-wasm@${coreVersion}\`. (line 6, column 12)`,
    ]);
    expect(existsSync(join(dir, "ckpt"))).toBe(false);

    // The hook hides only that package: a cpu run in the same setup trains.
    const cpu = await runCli(["run", await writeConfig(newDir(), "tfjs:\n  backend: cpu\n")], { nodeArgs: hideWasm });
    expect(cpu.code, cpu.stderr).toBe(0);
  });

  it("a tfjs section without @tensorflow/tfjs installed: exit 2, one line with the install command", async () => {
    const config = await writeConfig(newDir(), "tfjs:\n  backend: cpu\n");
    const r = await runCli(["run", config], { nodeArgs: hideWasm, env: { HIDE_PACKAGES: "@tensorflow/tfjs" } });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${config}: tfjs: The tfjs section needs @tensorflow/tfjs, which is not installed: run \`npm install @tensorflow/tfjs\`. (line 6, column 3)`,
    ]);
  });
});
