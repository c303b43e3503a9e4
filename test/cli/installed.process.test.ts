/**
 * The package as a user installs it: `npm pack` (whose `prepack` builds dist/), a consumer
 * project that `npm install`s the tarball offline, and the installed `monitored-session` bin
 * running a YAML file whose hook type comes from a plugin module, with a TypeScript job (loaded
 * through the project's tsx), then without tsx (one line saying how to fix it).
 *
 * Nothing is downloaded: the consumer's node_modules starts as a hard-linked copy of this
 * repository's, which npm prunes to what the tarball needs. Slow (a build): the one such test.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { LINEAR_GRAPH_SOURCE, root, spawnResult } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-installed-");
const npm = spawnSync("npm", ["--version"], { encoding: "utf8" });
const hasNpm = npm.status === 0;
if (!hasNpm) console.warn("SKIPPED test/cli/installed.process.test.ts: npm is not available");

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string; devDependencies: Record<string, string> };

/** The plugin example of docs/configuration.md, so that the documented example is the one that runs. */
const PLUGIN = ((): string => {
  const doc = readFileSync(join(root, "docs", "configuration.md"), "utf8");
  const m = /<!-- test\/cli\/installed\.process\.test\.ts[^>]*-->\n```js\n([\s\S]*?)```/.exec(doc);
  if (m === null) throw new Error("docs/configuration.md lost its plugin example");
  return m[1] as string;
})();

const JOB = `// A TypeScript job: Node 20 imports it through the project's tsx.
import { Graph } from "monitored-session";
import { defineJob } from "monitored-session/config";

${LINEAR_GRAPH_SOURCE}const lastStep: number = 1000;
export default defineJob({ graph, fetches: { train: "train", loss: "loss" }, lastStep });
`;

describe("the installed package", () => {
  it.skipIf(!hasNpm)("npm pack → npm install --offline → the bin runs a TypeScript job with a plugin's hook type; without tsx, one line with the fix", async () => {
    const dir = tempDir();
    const npmEnv: NodeJS.ProcessEnv = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" };
    delete npmEnv["NODE_OPTIONS"];

    // prepack builds dist/, so the tarball carries the compiled bin.
    const packed = await spawnResult("npm", ["pack", "--pack-destination", dir], { env: npmEnv, timeoutMs: 240_000 });
    expect(packed.code, packed.stderr).toBe(0);
    const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
    expect(tarball).toBe(`monitored-session-${pkg.version}.tgz`);

    const project = join(dir, "consumer");
    mkdirSync(project);
    // Hard links: fast, and npm's pruning of the copy unlinks only the copy's names.
    let linked = await spawnResult("cp", ["-al", join(root, "node_modules"), join(project, "node_modules")], { timeoutMs: 120_000 });
    if (linked.code !== 0) {
      // Another file system (no hard links across devices): a plain copy, slower.
      rmSync(join(project, "node_modules"), { recursive: true, force: true });
      linked = await spawnResult("cp", ["-a", join(root, "node_modules"), join(project, "node_modules")], { timeoutMs: 240_000 });
    }
    expect(linked.code, linked.stderr).toBe(0);
    writeFileSync(
      join(project, "package.json"),
      JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module", devDependencies: { tsx: pkg.devDependencies["tsx"] } }),
    );
    const installed = await spawnResult("npm", ["install", "--offline", "--no-audit", "--no-fund", `../${tarball as string}`], {
      cwd: project,
      env: npmEnv,
      timeoutMs: 180_000,
    });
    expect(installed.code, installed.stderr).toBe(0);

    writeFileSync(join(project, "my-hooks.js"), PLUGIN);
    writeFileSync(join(project, "job.ts"), JOB);
    writeFileSync(
      join(project, "train.yaml"),
      "module: ./job.ts\nplugins: [./my-hooks.js]\ncheckpoint: { dir: runs/ckpt, saveSteps: 100 }\nlogStepCountSteps: 0\nhooks:\n  - type: StopAfterRunsHook\n    runs: 4\n    tensor: loss\n",
    );
    const bin = join(project, "node_modules", ".bin", "monitored-session");
    const env = { ...npmEnv, CI: "true" };
    const run = await spawnResult(bin, ["run", "train.yaml"], { cwd: project, env, timeoutMs: 60_000 });
    expect(run.stderr).toContain("Done at global step 4.");
    expect(run.code, run.stderr).toBe(0);
    expect(readFileSync(join(project, "runs", "ckpt", "checkpoint"), "utf8")).toContain("model.ckpt-4");

    // The plugin's names are checked like the built-ins'.
    writeFileSync(join(project, "typo.yaml"), "module: ./job.ts\nplugins: [./my-hooks.js]\nhooks:\n  - { type: StopAfterRunsHook, runs: 4, tensor: los }\n");
    const typo = await spawnResult(bin, ["run", "typo.yaml"], { cwd: project, env, timeoutMs: 60_000 });
    expect(typo.code).toBe(2);
    expect(typo.stderr.trim()).toMatch(/hooks\[0\]\.tensor: "los" is not an op or variable of the session \(did you mean "loss"\?\)/);

    // Without tsx, a TypeScript job is one line saying how to run it.
    rmSync(join(project, "node_modules", "tsx"), { recursive: true });
    const noTsx = await spawnResult(bin, ["run", "train.yaml"], { cwd: project, env, timeoutMs: 60_000 });
    expect(noTsx.code).toBe(2);
    expect(noTsx.stderr.trimEnd().split("\n")).toEqual([
      expect.stringMatching(/train\.yaml: module: .*job\.ts is TypeScript, which Node \S+ cannot import by itself: install tsx in the project \(npm i -D tsx\)/),
    ]);
  }, 600_000);
});
