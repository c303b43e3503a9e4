/**
 * The retention of a `CheckpointManager`: which managed checkpoints stay after a save,
 * which are preserved forever (dropped from the state file) and which are deleted, by the
 * built-in sweep (`maxToKeep`, `keepCheckpointEveryNHours`) or a custom {@link RetentionPolicy}.
 * Planning deletes nothing; the manager applies the plan once the save is recorded.
 *
 * @module
 */

import { checkpointNumberOf } from "./checkpointNumbers.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A checkpoint the manager tracks (and may delete). */
export interface ManagedCheckpoint {
  /** The absolute prefix (`<dir>/<name>-<n>`). */
  readonly path: string;
  /** When it was recorded, Unix seconds. */
  readonly timestamp: number;
  /** The `<n>` of its name, or `null` if the name has no numeric suffix. */
  readonly checkpointNumber: number | null;
}

/** What a {@link RetentionPolicy} sees. */
export interface RetentionContext {
  /** The clock's time, Unix seconds. */
  readonly now: number;
  /** The newest checkpoint (always kept, whatever the policy says). */
  readonly latest: string;
  /** The last preserved timestamp, Unix seconds. */
  readonly lastPreservedTimestamp: number;
}

/** A retention decision: what stays managed, and what is kept forever but no longer managed. */
export interface RetentionDecision {
  /** Paths that stay managed. */
  readonly keep: readonly string[];
  /** Paths kept on disk forever and dropped from the state file (like `keepCheckpointEveryNHours`). */
  readonly preserve?: readonly string[];
}

/**
 * Decides which managed checkpoints to keep after each save. Checkpoints in neither `keep`
 * nor `preserve` are deleted. Replaces the built-in `maxToKeep` / `keepCheckpointEveryNHours`
 * sweep.
 *
 * @example
 * ```ts
 * import type { RetentionPolicy } from "monitored-session/checkpoint";
 *
 * // keep the 2 newest, plus every checkpoint whose number is a multiple of 1000
 * const policy: RetentionPolicy = (cps) => ({
 *   keep: cps.slice(-2).map((c) => c.path),
 *   preserve: cps.filter((c) => c.checkpointNumber !== null && c.checkpointNumber % 1000 === 0).map((c) => c.path),
 * });
 * ```
 */
export type RetentionPolicy = (checkpoints: readonly ManagedCheckpoint[], context: RetentionContext) => RetentionDecision;

/** A manager's retention settings and where it stands. */
interface RetentionRules {
  readonly policy: RetentionPolicy | undefined;
  readonly maxToKeep: number | null;
  readonly keepEveryNHours: number | null;
  readonly checkpointName: string;
  /** The last preserved timestamp before this sweep, Unix seconds. */
  readonly lastPreserved: number;
  /** The clock's time, Unix seconds (read only for a custom policy). */
  readonly nowSecs: () => number;
}

/** What a sweep leaves: the checkpoints still managed, the new last preserved timestamp, the checkpoints to delete (oldest first). */
interface RetentionPlan {
  readonly managed: Map<string, number>;
  readonly lastPreserved: number;
  readonly remove: string[];
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Applies the retention to `managed` (path → timestamp, oldest first; it is changed), without
 * deleting anything. `latest` is never deleted.
 */
export const planRetention = (managed: Map<string, number>, latest: string, rules: RetentionRules): RetentionPlan => {
  if (rules.policy !== undefined) return planWithPolicy(rules.policy, managed, latest, rules);
  const remove: string[] = [];
  let lastPreserved = rules.lastPreserved;
  if (rules.maxToKeep !== null) {
    while (managed.size > rules.maxToKeep) {
      const [path, ts] = managed.entries().next().value as [string, number];
      managed.delete(path);
      if (rules.keepEveryNHours !== null && ts - rules.keepEveryNHours * 3600 >= lastPreserved) {
        lastPreserved = ts;
        continue;
      }
      remove.push(path);
    }
  }
  return { managed, lastPreserved, remove };
};

const planWithPolicy = (policy: RetentionPolicy, managed: Map<string, number>, latest: string, rules: RetentionRules): RetentionPlan => {
  const checkpoints = [...managed].map(([path, timestamp]) => ({
    path,
    timestamp,
    checkpointNumber: checkpointNumberOf(path, rules.checkpointName),
  }));
  let lastPreserved = rules.lastPreserved;
  const decision = policy(checkpoints, { now: rules.nowSecs(), latest, lastPreservedTimestamp: lastPreserved });
  const keep = new Set(decision.keep);
  const preserve = new Set(decision.preserve ?? []);
  const remove: string[] = [];
  for (const c of checkpoints) {
    if (c.path === latest) continue; // the newest checkpoint is never deleted
    if (preserve.has(c.path)) {
      managed.delete(c.path);
      lastPreserved = Math.max(lastPreserved, c.timestamp);
    } else if (!keep.has(c.path)) {
      managed.delete(c.path);
      remove.push(c.path);
    }
  }
  return { managed, lastPreserved, remove };
};
