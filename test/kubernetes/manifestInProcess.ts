/**
 * `manifest kubernetes` through `manifestCommand` in this process, with its flags as commander
 * gives them (its defaults filled in): for the tests that set flags directly, and read what it
 * printed and the objects.
 */
import { Writable } from "node:stream";
import { parseAllDocuments } from "yaml";

import { manifestCommand, type ManifestFlags } from "../../src/cli/manifest.js";
import { MANIFEST_DEFAULTS } from "../../src/kubernetes/manifestDefaults.js";

type Json = Record<string, unknown>;

/** What the command printed, its exit code, and the objects (none unless it exited 0). */
export interface ManifestRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly objects: Json[];
}

/** Runs the command on `config` (or `-- command`), from `cwd` (default: this process's). */
export const manifestInProcess = async (
  config: string | undefined,
  flags: Partial<ManifestFlags> & Pick<ManifestFlags, "workers" | "image">,
  options: { readonly command?: readonly string[]; readonly cwd?: string } = {},
): Promise<ManifestRun> => {
  const captured = { stdout: "", stderr: "" };
  const sink = (key: keyof typeof captured): Writable =>
    new Writable({
      write(chunk: Buffer | string, _encoding, done) {
        captured[key] += String(chunk);
        done();
      },
    });
  const all: ManifestFlags = { namespace: "default", maxRestarts: 3, ...MANIFEST_DEFAULTS, ...flags };
  const io = { out: sink("stdout"), err: sink("stderr"), env: {}, isTTY: false, ...(options.cwd === undefined ? {} : { cwd: options.cwd }) };
  const code = await manifestCommand(config, options.command, all, io);
  const objects = code === 0 ? parseAllDocuments(captured.stdout).map((d) => d.toJS() as Json) : [];
  return { code, ...captured, objects };
};
