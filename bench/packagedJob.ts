/**
 * The bundled job as an installed package runs it, for the benchmarks that compare a start from
 * a clone with one from the package: {@link buildPackage} builds `dist/` (`npm run build`), and
 * {@link writePackagedJob} copies the job's two modules with their `../src/` imports rewritten to
 * the package's name, so that a job loaded by the compiled CLI uses `dist/` (the one copy of the
 * library in the process), as a user's job does. The copies live inside the package (under the
 * gitignored `runs/`), where the package's name resolves to itself.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { repoRoot } from "../test/util/cliChild.js";

/** The compiled command line, as `npm install` gives it (the package's `bin`), relative to the package. */
export const COMPILED_CLI = "dist/src/cli/main.js";

/** Builds `dist/` (`npm run build`); throws with the build's output when it fails. */
export const buildPackage = (benchmark: string): void => {
  const build = spawnSync("npm", ["run", "--silent", "build"], { cwd: repoRoot, encoding: "utf8" });
  if (build.status !== 0) throw new Error(`${benchmark} benchmark: npm run build failed:\n${build.stdout}${build.stderr}`);
};

/** Each `../src/` import the rewrite knows, and the package subpath that replaces it. */
const BY_NAME: readonly (readonly [RegExp, string])[] = [
  [/"\.\.\/src\/config\/index\.js"/g, '"monitored-session/config"'],
  [/"\.\.\/src\/creation\/Scaffold\.js"/g, '"monitored-session"'],
  [/"\.\.\/src\/tfjs\/index\.js"/g, '"monitored-session/tfjs"'],
  [/"\.\.\/src\/preemption\/index\.js"/g, '"monitored-session/preemption"'],
  [/"\.\.\/src\/runtime\/index\.js"/g, '"monitored-session/runtime"'],
  [/"\.\.\/src\/index\.js"/g, '"monitored-session"'],
];

/**
 * Copies `examples/<names>` into `runs/<folder>` of the package with their `../src/` imports
 * rewritten to the package's name; the path of the first copy. Throws if an import it does not
 * rewrite is left.
 */
export const writePackagedExample = (benchmark: string, folder: string, names: readonly string[]): string => {
  const dir = join(repoRoot, "runs", folder);
  mkdirSync(dir, { recursive: true });
  for (const name of names) {
    const source = BY_NAME.reduce((text, [from, to]) => text.replace(from, to), readFileSync(join(repoRoot, "examples", name), "utf8"));
    if (source.includes("../src/")) throw new Error(`${benchmark} benchmark: examples/${name} imports from ../src/ in a way this benchmark does not rewrite`);
    writeFileSync(join(dir, name), source);
  }
  return join(dir, names[0] as string);
};

/** The bundled job's modules, importing monitored-session by its package name (see {@link writePackagedExample}); the path of the job module. */
export const writePackagedJob = (benchmark: string, folder: string): string =>
  writePackagedExample(benchmark, folder, ["tfjs-classifier.job.ts", "tfjs-classifier-data.ts"]);
