/**
 * A directory laid out like the repository for the bundled example: `examples/` with
 * `tfjs-classifier.yaml` (a byte-for-byte copy, or the copy with `edit` applied) and links to the
 * job's modules (which Node resolves to their real paths), so the YAML's relative `module` and
 * `checkpoint.dir` (`../runs/...`) resolve as in the repository, without writing into it.
 */
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { repoRoot } from "./cliChild.js";

const EXAMPLE_MODULES = ["tfjs-classifier.job.ts", "tfjs-classifier-data.ts"];

/** Lays the example out under `root`; the path of its YAML. */
export const exampleTree = (root: string, edit: (yaml: string) => string = (y) => y): string => {
  mkdirSync(join(root, "examples"));
  const yaml = join(root, "examples/tfjs-classifier.yaml");
  writeFileSync(yaml, edit(readFileSync(join(repoRoot, "examples/tfjs-classifier.yaml"), "utf8")));
  for (const f of EXAMPLE_MODULES) symlinkSync(join(repoRoot, "examples", f), join(root, "examples", f));
  return yaml;
};
