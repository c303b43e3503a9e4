/**
 * How a `CheckpointManager` takes up its directory's `checkpoint` state file: a valid one is
 * adopted (its managed checkpoints and last preserved timestamp); a bad one (invalid, or naming
 * a checkpoint that does not exist) is rebuilt by the directory's writer from the checkpoints on
 * disk that verify, the bad file kept beside it, and otherwise ignored with a warning.
 *
 * @module
 */

import { rename } from "node:fs/promises";
import { join } from "node:path";

import type { Clock } from "../time/Clock.js";
import { DataLossError, NotFoundError } from "../errors.js";
import type { Logger } from "../Logger.js";
import { scanCheckpointNumbers } from "./checkpointNumbers.js";
import { updateCheckpointState, type CheckpointState, type CheckpointStateRead } from "./CheckpointState.js";
import type { Saver } from "./Saver.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The manager's directory, its state file and checkpoint names, and what it reads them with. */
interface RecoveryContext {
  readonly directory: string;
  readonly checkpointName: string;
  readonly latestFilename: string;
  readonly saver: Saver;
  readonly clock: Clock;
  readonly logger: Logger;
  /** Whether a bad state file may be rewritten: the manager holds the directory's lock. */
  readonly repair: boolean;
  /** The manager's last preserved timestamp, recorded in a rebuilt state file. */
  readonly lastPreserved: number;
}

/** Where a state file puts the manager: its latest checkpoint and last preserved timestamp. */
interface AdoptedState {
  readonly latest: string;
  readonly lastPreserved: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The state to adopt from what `readCheckpointState` read: the file's, the one rebuilt from
 * the checkpoints on disk when the file is bad and `repair` allows it, else `undefined`
 * (nothing to adopt; an invalid file is logged).
 */
export const recoverState = async (read: CheckpointStateRead, context: RecoveryContext): Promise<CheckpointState | undefined> => {
  const bad =
    read.status === "invalid"
      ? `is invalid (${read.problems.join("; ")})`
      : read.status === "ok" && !(await context.saver.exists(read.state.modelCheckpointPath))
        ? `names ${read.state.modelCheckpointPath}, which does not exist`
        : null;
  // The writer repairs a bad state file from the checkpoints on disk rather than start over.
  if (bad !== null && context.repair) {
    const rebuilt = await rebuildState(read.file, bad, context);
    if (rebuilt !== undefined) return rebuilt;
  }
  if (read.status === "invalid") {
    context.logger.warn(`${read.file}: invalid checkpoint state; checkpoint ignored:\n  ${read.problems.join("\n  ")}`, {
      path: read.file,
      problems: read.problems,
    });
  }
  if (read.status !== "ok") return undefined;
  return read.state;
};

/**
 * Takes up a state: its latest checkpoint, its last preserved timestamp (clamped to `now`), and
 * its checkpoints newer than that, added to `managed` (path → timestamp, none in the future).
 */
export const adoptState = (state: CheckpointState, now: number, logger: Logger, managed: Map<string, number>): AdoptedState => {
  let lastPreserved = state.lastPreservedTimestamp;
  if (now < lastPreserved) {
    logger.warn(`The clock (${now}) is behind the last preserved checkpoint timestamp (${lastPreserved}); clamping it to now.`);
    lastPreserved = now;
  }
  const paths = state.allModelCheckpointPaths;
  const stamps = state.allModelCheckpointTimestamps.length > 0 ? state.allModelCheckpointTimestamps : paths.map(() => lastPreserved);
  for (let i = 0; i < Math.min(paths.length, stamps.length); i++) {
    const ts = Math.min(stamps[i] as number, now);
    if (ts > lastPreserved) managed.set(paths[i] as string, ts);
  }
  return { latest: state.modelCheckpointPath, lastPreserved };
};

/**
 * Rewrites a bad state file from the checkpoints on disk: every `<name>-<n>` bundle whose
 * checksums verify is listed, the one with the highest global step as the latest; nothing is
 * deleted. The bad file is kept as `<state>.corrupt-<time>`. Resolves `undefined` (changing
 * nothing) if no checkpoint verifies, else the state written.
 */
const rebuildState = async (file: string, why: string, context: RecoveryContext): Promise<CheckpointState | undefined> => {
  const { directory, checkpointName, saver, clock, logger } = context;
  const verified: { path: string; step: number; n: number }[] = [];
  for (const n of await scanCheckpointNumbers(directory, checkpointName)) {
    const path = join(directory, `${checkpointName}-${n}`);
    try {
      verified.push({ path, step: (await saver.restore(path)).step, n });
    } catch (e) {
      if (!(e instanceof NotFoundError || e instanceof DataLossError)) throw e;
      logger.warn(`Checkpoint ${path} does not verify and is left out of the rebuilt state: ${e.message}`, { path });
    }
  }
  if (verified.length === 0) return undefined;
  verified.sort((a, b) => a.step - b.step || a.n - b.n);
  const latest = (verified[verified.length - 1] as { path: string; step: number }).path;
  const now = clock.now() / 1000;
  const kept = `${file}.corrupt-${new Date(clock.now()).toISOString().replace(/[:.]/g, "-")}`;
  await rename(file, kept);
  const state = {
    modelCheckpointPath: latest,
    allModelCheckpointPaths: verified.map((v) => v.path),
    allModelCheckpointTimestamps: verified.map(() => now),
    lastPreservedTimestamp: context.lastPreserved,
  };
  await updateCheckpointState(directory, state, { latestFilename: context.latestFilename });
  logger.warn(
    `The checkpoint state file ${file} ${why}; kept it as ${kept} and rewrote it from the ${verified.length} checkpoint(s) that verify: resuming from ${latest} (step ${(verified[verified.length - 1] as { step: number }).step}).`,
    { path: file, kept, latest },
  );
  return state;
};
