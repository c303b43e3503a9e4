/**
 * A job written inside a clone of this repository imports the package by its name, as in a
 * user's project: package.json's `exports` resolve "monitored-session" to src/ under the
 * `monitored-session-source` condition, which `npm run cli` (and `npm start`) set, so the job
 * gets the CLI's own copy of the library, with or without a build (dist/).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";

import { cli, LINEAR_GRAPH_SOURCE, root, spawnResult } from "../util/cli.js";

const CONDITION = "monitored-session-source";
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  exports: Record<string, null | string | Record<string, string>>;
  scripts: Record<string, string>;
};

/** Directories made under the repository's tmp/ (ignored by git), removed after each test. */
const made: string[] = [];
afterEach(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A job inside the repository that imports the package by name, and its configuration. */
const jobInsideTheRepository = (): string => {
  mkdirSync(join(root, "tmp"), { recursive: true });
  const dir = mkdtempSync(join(root, "tmp", "self-reference-"));
  made.push(dir);
  writeFileSync(
    join(dir, "job.ts"),
    `import { Graph } from "monitored-session";
import { defineJob } from "monitored-session/config";
import { NanTensorHook } from "monitored-session/hooks";
${LINEAR_GRAPH_SOURCE}
export default defineJob({ graph, fetches: { train: "train", loss: "loss" }, hooks: [new NanTensorHook({ lossTensor: "loss" })] });
`,
  );
  writeFileSync(join(dir, "c.yaml"), "module: ./job.ts\nlastStep: 5\nlogStepCountSecs: 0\n");
  return join(dir, "c.yaml");
};

describe("a job inside the repository imports monitored-session by its name", () => {
  it("npm run cli trains it (the package name gives the CLI's copy in src/, no build needed)", async () => {
    const config = jobInsideTheRepository();
    const r = await spawnResult("npm", ["run", "--silent", "cli", "--", "run", config], { env: { ...process.env, CI: "true" } });
    expect(r.stderr).toContain("Done at global step 5.");
    expect(r.stderr).not.toContain("another copy");
    expect(r.code).toBe(0);
  });

  it("under the condition every subpath resolves to its source file, whatever dist/ holds; npm start and npm run cli set it", async () => {
    const subpaths = Object.entries(pkg.exports).flatMap(([key, target]) => (target !== null && typeof target === "object" ? [[key, target] as const] : []));
    expect(subpaths.length).toBeGreaterThan(10);
    const specifiers = subpaths.map(([key]) => (key === "." ? "monitored-session" : `monitored-session/${key.slice(2)}`));
    // Resolved from a module inside the repository (a self-reference), without loading anything.
    const program = `for (const s of ${JSON.stringify(specifiers)}) console.log(import.meta.resolve(s));`;
    const r = await spawnResult(process.execPath, [`--conditions=${CONDITION}`, "--input-type=module", "--eval", program]);
    expect(r.stderr).toBe("");
    expect(r.stdout.trim().split("\n")).toEqual(subpaths.map(([, target]) => pathToFileURL(join(root, target[CONDITION] as string)).href));
    // The condition comes first (Node takes the first matching key), and names the source of the built file.
    for (const [key, target] of subpaths) {
      expect(Object.keys(target)[0], key).toBe(CONDITION);
      expect((target[CONDITION] as string).replace(/\.ts$/, ".js"), key).toBe((target["import"] as string).replace(/^\.\/dist\//, "./"));
    }
    for (const script of ["start", "cli"]) expect(pkg.scripts[script], script).toMatch(new RegExp(`^exec node --conditions=${CONDITION} --import tsx src/cli/main\\.ts`));
  });

  it("run without the condition, the one line says how to run it (before a build: dist/ missing; after: another copy)", async () => {
    const config = jobInsideTheRepository();
    const r = await cli(["run", config]);
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`npm run cli -- ...`);
    expect(r.stderr).toContain(`--conditions=${CONDITION}`);
  });
});
