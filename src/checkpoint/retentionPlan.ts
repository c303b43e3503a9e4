/**
 * The retention of a `CheckpointManager`: which managed checkpoints stay after a save,
 * which are preserved forever (dropped from the state file) and which are deleted, by a
 * {@link RetentionPolicy}: a value, built in ({@link Retention}: TensorFlow's `maxToKeep` and
 * `keepCheckpointEveryNHours`, and their union) or your own. Planning deletes nothing; the
 * manager applies the plan once the save is recorded.
 *
 * @module
 */

import { ValueError } from "../errors.js";
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

/** A {@link RetentionPolicy} with a one-line description of itself (for messages that compare settings). */
export interface DescribedRetentionPolicy extends RetentionPolicy {
  readonly description: string;
}

/**
 * The built-in retention policies, as values: TensorFlow's `max_to_keep` and
 * `keep_checkpoint_every_n_hours`, and their union. `CheckpointManager`'s `maxToKeep` and
 * `keepCheckpointEveryNHours` options are {@link Retention.tensorflow} of the two; give
 * `retentionPolicy` (to the manager, `CheckpointSaverHook`, `monitoredTrainingSession` or
 * `Supervisor`) to combine them otherwise, or with a policy of your own.
 *
 * @example
 * ```ts
 * import { CheckpointManager, Retention, type RetentionPolicy } from "monitored-session/checkpoint";
 *
 * // The 3 newest, every 10,000th, and one per 6 hours of the rest.
 * const tenThousands: RetentionPolicy = (cps) => ({
 *   keep: cps.filter((c) => c.checkpointNumber !== null && c.checkpointNumber % 10_000 === 0).map((c) => c.path),
 * });
 * const manager = await CheckpointManager.create({
 *   directory: "/tmp/run",
 *   retentionPolicy: Retention.keepCheckpointEveryNHours(6, Retention.union(Retention.maxToKeep(3), tenThousands)),
 * });
 * ```
 */
export const Retention = {
  /** The `n` newest checkpoints stay (TensorFlow's `max_to_keep`); `null` keeps all. `n` must be a positive integer. */
  maxToKeep(n: number | null): DescribedRetentionPolicy {
    if (n !== null && (!Number.isInteger(n) || n <= 0)) throw new ValueError(`Retention.maxToKeep: a positive integer or null (keep all), got ${n}`);
    const policy = (checkpoints: readonly ManagedCheckpoint[]): RetentionDecision => ({ keep: (n === null ? checkpoints : checkpoints.slice(-n)).map((c) => c.path) });
    return Object.assign(policy, { description: n === null ? "keep all" : `the ${n} newest` });
  },

  /**
   * TensorFlow's `keep_checkpoint_every_n_hours` on top of `base`: of the checkpoints `base`
   * lets go, oldest first, one is preserved (kept on disk, no longer managed) whenever it is at
   * least `hours` newer than the last one preserved.
   */
  keepCheckpointEveryNHours(hours: number, base: RetentionPolicy): DescribedRetentionPolicy {
    if (!(typeof hours === "number" && hours > 0 && Number.isFinite(hours))) throw new ValueError(`Retention.keepCheckpointEveryNHours: a positive number of hours, got ${hours}`);
    const policy = (checkpoints: readonly ManagedCheckpoint[], context: RetentionContext): RetentionDecision => {
      const inner = base(checkpoints, context);
      const kept = new Set(inner.keep);
      const preserve = [...(inner.preserve ?? [])];
      let last = context.lastPreservedTimestamp;
      for (const c of checkpoints) {
        if (kept.has(c.path) || preserve.includes(c.path)) continue;
        if (c.timestamp - hours * 3600 >= last) {
          last = c.timestamp;
          preserve.push(c.path);
        }
      }
      return { keep: inner.keep, preserve };
    };
    return Object.assign(policy, { description: `${describePolicy(base)}, and one per ${hours} h of the rest` });
  },

  /** What any of `policies` keeps stays; what any preserves (and none keeps) is preserved. */
  union(...policies: readonly RetentionPolicy[]): DescribedRetentionPolicy {
    const policy = (checkpoints: readonly ManagedCheckpoint[], context: RetentionContext): RetentionDecision => {
      const decisions = policies.map((p) => p(checkpoints, context));
      const keep = new Set(decisions.flatMap((d) => d.keep));
      return { keep: [...keep], preserve: [...new Set(decisions.flatMap((d) => d.preserve ?? []))].filter((p) => !keep.has(p)) };
    };
    return Object.assign(policy, { description: policies.map(describePolicy).join(" or ") });
  },

  /** TensorFlow's pair as its managers apply it: `maxToKeep`, then `keepCheckpointEveryNHours` (`null`: none) of what it lets go. */
  tensorflow(settings: { readonly maxToKeep: number | null; readonly keepCheckpointEveryNHours: number | null }): DescribedRetentionPolicy {
    const base = Retention.maxToKeep(settings.maxToKeep);
    return settings.keepCheckpointEveryNHours === null ? base : Retention.keepCheckpointEveryNHours(settings.keepCheckpointEveryNHours, base);
  },
};

/**
 * Refuses a retention policy given beside the two options it replaces (`maxToKeep`,
 * `keepCheckpointEveryNHours`): one `ValueError` line naming `who`, the same wherever retention
 * is set (the manager, the saver hook, `monitoredTrainingSession`).
 */
export const assertOneRetention = (
  who: string,
  options: { readonly retentionPolicy?: RetentionPolicy | undefined; readonly maxToKeep?: number | null | undefined; readonly keepCheckpointEveryNHours?: number | null | undefined },
): void => {
  if (options.retentionPolicy !== undefined && (options.maxToKeep !== undefined || options.keepCheckpointEveryNHours !== undefined)) {
    throw new ValueError(`${who}: give retentionPolicy or maxToKeep and keepCheckpointEveryNHours, not both (Retention.tensorflow makes the policy of the two)`);
  }
};

/** A policy's description, or "a custom policy". */
export const describePolicy = (policy: RetentionPolicy): string => (policy as Partial<DescribedRetentionPolicy>).description ?? "a custom policy";

/** A manager's retention settings and where it stands. */
interface RetentionRules {
  readonly policy: RetentionPolicy;
  readonly checkpointName: string;
  /** The last preserved timestamp before this sweep, Unix seconds. */
  readonly lastPreserved: number;
  /** The clock's time, Unix seconds. */
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
export const planRetention = (managed: Map<string, number>, latest: string, rules: RetentionRules): RetentionPlan => planWithPolicy(rules.policy, managed, latest, rules);

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
