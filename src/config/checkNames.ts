/**
 * `checkNames`: the fetch, op and tensor names a configuration and its job refer to (the job's
 * `fetches`, hooks' `lossTensor`, `tensors`, `summaryOp`...), checked against the names a
 * session lists, with a "did you mean" for a likely typo. Run before anything is written, it
 * turns a typo into a configuration problem instead of a failure at the first step.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import { checkNames, type Job, type TrainingConfig } from "monitored-session/config";
 *
 * declare const config: TrainingConfig; // decoded from the YAML
 * declare const job: Job; // the module's default export
 * const issues = checkNames(config, job, graph.session().names());
 * ```
 *
 * @module
 */

import type { Fetches } from "../session/Session.js";
import { HookRegistry, namesIn, type HookConfig } from "./HookRegistry.js";
import type { Job } from "./Job.js";
import { closest, type Issue } from "../codec.js";
import type { TrainingConfig } from "./TrainingConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A name used by a configuration, and where: `[path, name]` (`hooks[0].lossTensor`, `loss`). */
export type NameUse = readonly [path: string, name: string];

/**
 * What of a configuration uses names: its hooks. An entry that did not decode (`undefined`, in
 * the parts of a configuration with problems) is skipped; the others keep their index.
 */
type HooksOf = { readonly hooks?: readonly (HookConfig | undefined)[] | undefined };

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * The names `config` (hooks, through their type's `names`) and `job` (`fetches`, default
 * `"train"`) use. Job paths start at `default`, as {@link decodeJob}'s do.
 */
export const namesUsed = <F extends Fetches>(config: TrainingConfig | HooksOf, job: Job<F>, registry: HookRegistry = HookRegistry.builtins): NameUse[] => [
  ...namesIn(job.fetches ?? "train", "default.fetches"),
  ...(config.hooks ?? []).flatMap((entry, i) => (entry === undefined ? [] : registry.namesOf(entry).map(([p, n]): NameUse => [`hooks[${i}].${p}`, n]))),
];

/**
 * The problems of the names `config` and `job` use that are not in `known` (a session's
 * `names()`); names the job feeds with fixed `feeds` count as known. One issue per use, with a
 * suggestion when a known name is close.
 */
export const checkNames = <F extends Fetches>(
  config: TrainingConfig | HooksOf,
  job: Job<F>,
  known: readonly string[],
  registry: HookRegistry = HookRegistry.builtins,
): Issue[] => {
  const feeds = typeof job.feeds === "object" ? Object.keys(job.feeds) : [];
  const all = [...known, ...feeds];
  const set = new Set(all);
  return namesUsed(config, job, registry)
    .filter(([, name]) => !set.has(name))
    .map(([path, name]) => {
      const hint = closest(name, all);
      return {
        path,
        message: `"${name}" is not an op or variable of the session${hint === undefined ? "" : ` (did you mean "${hint}"?)`}; it has ${preview(all)}`,
      };
    });
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const preview = (names: readonly string[]): string =>
  names.length <= 12 ? names.join(", ") : `${names.slice(0, 12).join(", ")} and ${names.length - 12} more`;
