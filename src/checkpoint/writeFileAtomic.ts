/**
 * `writeFileAtomic`: replacing a file so that a crash leaves either the old file or the new
 * one, the way checkpoints are written. Public (`monitored-session/checkpoint`) for programs
 * that write files beside their checkpoints, as the TensorFlow.js model export does.
 *
 * @module
 */

import { dirname } from "node:path";

import { fsyncDir, stageFile } from "./internal/files.js";
import { processTempFiles, type TempFileRegistry } from "./TempFileRegistry.js";

/**
 * Replaces `path` atomically with `data`: write to a temporary name, fsync it, rename it over
 * `path`, fsync the directory. A crash leaves either the old file or the new one (and maybe a
 * temporary file that the checkpoint directory's cleanup recognises).
 */
export const writeFileAtomic = async (path: string, data: string | Uint8Array, temps: TempFileRegistry = processTempFiles): Promise<void> => {
  const staged = await stageFile(path, data, temps);
  try {
    await staged.sync();
    await staged.publish();
    await fsyncDir(dirname(path));
  } finally {
    await staged.abort();
  }
};
