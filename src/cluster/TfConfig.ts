/**
 * `TF_CONFIG`, the environment variable that tells each process of a cluster what the cluster is
 * and which task it is: `{"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222"]},
 * "task": {"type": "worker", "index": 0}}`. Decoded with an io-ts codec; a bad value lists
 * every problem with its path (`task.index: 3 is not a task of job "worker" (its tasks: 0, 1)`).
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { isLeft, left, type Either } from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";
import { ValueError } from "../errors.js";
import { closest, formatIssue, NonEmptyString, NonNegativeInt, optional, required, show, struct, toIssues, type Issue as ConfigIssue } from "../codec.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The name of the environment variable. */
export const TF_CONFIG = "TF_CONFIG";

/** A task address `host:port` (IPv6 hosts in brackets: `[::1]:2222`); port 0 asks for a free port. */
export const TaskAddress = new t.Type<string, string, unknown>(
  "an address host:port",
  (u): u is string => typeof u === "string" && parseAddress(u) !== undefined,
  (u, c) => (typeof u === "string" && parseAddress(u) !== undefined ? t.success(u) : t.failure(u, c)),
  (a) => a,
);

/** A job's tasks in TF_CONFIG: a list of addresses (dense) or an object from task index to address (sparse). */
const JobTasksCodec = new t.Type<readonly string[] | Readonly<Record<string, string>>, unknown, unknown>(
  "a list of addresses or an object from task index to address",
  (u): u is readonly string[] | Readonly<Record<string, string>> => !isLeft(validateJob(u, [])),
  (u, c) => validateJob(u, c),
  (a) => a,
);

/** The `cluster` field: job name to tasks, at least one job. */
const ClusterField = new t.Type<Readonly<Record<string, readonly string[] | Readonly<Record<string, string>>>>, unknown, unknown>(
  "an object from job name to its tasks",
  (u): u is Readonly<Record<string, readonly string[] | Readonly<Record<string, string>>>> => !isLeft(validateCluster(u, [])),
  (u, c) => validateCluster(u, c),
  (a) => a,
);

/** The `task` field: this process's job and index. */
const TaskField = struct("TfConfigTask", "This process's place in the cluster.", {
  type: required(NonEmptyString, "The job of this task (`chief`, `worker`, ...)."),
  index: required(NonNegativeInt, "The index of this task within its job."),
});

/** The decoded TF_CONFIG. */
export type TfConfig = t.TypeOf<typeof TfConfigCodec>;

/**
 * TF_CONFIG's codec: `cluster` and `task` are required; `rpc_layer` (only `grpc`) and
 * `environment` (kept, unused) as TensorFlow's resolver accepts them. Cross-field rules: the task's
 * job is in the cluster, its index is one of the job's tasks, and there is at most one `chief`.
 */
export const TfConfigCodec = struct(
  "TF_CONFIG",
  "The cluster and this process's task.",
  {
    cluster: required(ClusterField, "Job name to the addresses of its tasks."),
    task: required(TaskField, "This process's job and index."),
    rpc_layer: optional(t.literal("grpc"), "The transport; only grpc.", "grpc"),
    environment: optional(t.string, "Where the cluster runs (TensorFlow passes it on; unused here)."),
  },
  (v) => {
    const cluster = v.cluster as unknown;
    const task = v.task as unknown;
    if (!isRecord(cluster)) return [];
    const out: { key?: string; message: string }[] = [];
    const chief = cluster["chief"];
    const chiefCount = Array.isArray(chief) ? chief.length : isRecord(chief) ? Object.keys(chief).length : 0;
    if (chiefCount > 1) out.push({ key: "cluster.chief", message: `a cluster has at most one chief task (got ${chiefCount})` });
    if (!isRecord(task) || typeof task["type"] !== "string" || task["type"] === "") return out;
    const jobs = Object.keys(cluster);
    if (jobs.length === 0) return out; // reported by the cluster field
    const type = task["type"];
    const tasks = cluster[type];
    if (tasks === undefined) {
      const hint = closest(type, jobs);
      out.push({
        key: "task.type",
        message: `"${type}" is not a job of the cluster${hint === undefined ? "" : ` (did you mean "${hint}"?)`}; its jobs are ${jobs.join(", ")}`,
      });
      return out;
    }
    const index = task["index"];
    const indices = Array.isArray(tasks) ? tasks.map((_, i) => i) : isRecord(tasks) ? Object.keys(tasks).map(Number) : [];
    if (typeof index === "number" && Number.isSafeInteger(index) && index >= 0 && !indices.includes(index)) {
      out.push({
        key: "task.index",
        message: `${index} is not a task of job "${type}" (its tasks: ${indices.length === 0 ? "none" : indices.sort((a, b) => a - b).join(", ")})`,
      });
    }
    return out;
  },
);

/** A TF_CONFIG that did not decode. The message is one line listing every problem; `issues` has them. */
export class TfConfigError extends ValueError {
  override readonly name: string = "TfConfigError";
  constructor(readonly issues: readonly ConfigIssue[]) {
    super(`invalid ${TF_CONFIG}: ${issues.map(formatIssue).join("; ")}`);
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Decodes TF_CONFIG's JSON text; every problem with its path (`(root)` for bad JSON). */
export const decodeTfConfig = (text: string): Either<ConfigIssue[], TfConfig> => {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return left([{ path: "(root)", message: `not valid JSON (${(e as Error).message})` }]);
  }
  return pipe(TfConfigCodec.decode(json), E.mapLeft(toIssues));
};

/**
 * TF_CONFIG from the environment: `undefined` when the variable is unset or blank (one process,
 * no cluster). @throws TfConfigError when it is set but invalid.
 */
export const tfConfigFromEnv = (env: NodeJS.ProcessEnv = process.env): TfConfig | undefined => {
  const text = env[TF_CONFIG];
  if (text === undefined || text.trim() === "") return undefined;
  return pipe(
    decodeTfConfig(text),
    E.getOrElseW((issues) => {
      throw new TfConfigError(issues);
    }),
  );
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** `host` and `port` of `host:port` (`[v6]:port` too), or `undefined` when it has no valid port. */
export const parseAddress = (address: string): { readonly host: string; readonly port: number } | undefined => {
  const m = /^(\[[^\]]+\]|[^:\s[\]]+):(\d{1,5})$/.exec(address);
  if (m === null) return undefined;
  const port = Number(m[2]);
  if (port > 65535) return undefined;
  const host = (m[1] as string).startsWith("[") ? (m[1] as string).slice(1, -1) : (m[1] as string);
  return { host, port };
};

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u);

const validateCluster = (u: unknown, c: t.Context): t.Validation<Record<string, readonly string[] | Record<string, string>>> => {
  if (!isRecord(u)) return t.failure(u, c, `expected an object from job name to its tasks, got ${show(u)}`);
  if (Object.keys(u).length === 0) return t.failure(u, c, `expected at least one job, got {}`);
  const errors: t.ValidationError[] = [];
  const out: Record<string, readonly string[] | Record<string, string>> = {};
  for (const [job, tasks] of Object.entries(u)) {
    const r = validateJob(tasks, [...c, { key: job, type: JobTasksCodec, actual: tasks }]);
    if (isLeft(r)) errors.push(...r.left);
    else out[job] = r.right;
  }
  return errors.length > 0 ? t.failures(errors) : t.success(out);
};

const validateJob = (u: unknown, c: t.Context): t.Validation<readonly string[] | Record<string, string>> => {
  const errors: t.ValidationError[] = [];
  const check = (value: unknown, key: string): void => {
    const r = TaskAddress.validate(value, [...c, { key, type: TaskAddress, actual: value }]);
    if (isLeft(r)) errors.push(...r.left);
  };
  if (Array.isArray(u)) {
    u.forEach((v, i) => check(v, String(i)));
    return errors.length > 0 ? t.failures(errors) : t.success(u as string[]);
  }
  if (isRecord(u)) {
    for (const [k, v] of Object.entries(u)) {
      if (!/^(0|[1-9]\d{0,9})$/.test(k) || Number(k) > 2 ** 31 - 1) {
        errors.push({ value: k, context: [...c, { key: k, type: t.never, actual: v }], message: `task index "${k}" is not an integer >= 0` });
      } else check(v, k);
    }
    return errors.length > 0 ? t.failures(errors) : t.success(u as Record<string, string>);
  }
  return t.failure(u, c, `expected a list of addresses or an object from task index to address, got ${show(u)}`);
};
