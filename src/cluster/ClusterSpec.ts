/**
 * `ClusterSpec`: the jobs of a cluster and the addresses of their tasks, as TensorFlow's
 * `tf.train.ClusterSpec` describes them. A job is dense (a list: tasks 0..n-1) or sparse (an
 * object from task index to address, with holes). The spec is immutable: it copies what it is
 * built from.
 *
 * @example
 * ```ts
 * import { ClusterSpec } from "monitored-session/cluster";
 *
 * const cluster = new ClusterSpec({
 *   chief: ["chief0.example.com:2222"],
 *   worker: ["worker0.example.com:2222", "worker1.example.com:2222"],
 * });
 * cluster.numTasks("worker"); // 2
 * cluster.taskAddress("chief", 0); // "chief0.example.com:2222"
 * ```
 *
 * @module
 */

import { create, isMessage } from "@bufbuild/protobuf";
import { ValueError } from "../errors.js";
import { type ClusterDef, ClusterDefSchema, JobDefSchema } from "./proto/gen/monitored_session/v1/cluster_pb.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The tasks of one job: a list (dense, indices 0..n-1) or an object from index to address (sparse). */
export type JobTasks = readonly string[] | { readonly [taskIndex: number]: string };

/** A cluster as a plain object: job name to its tasks. */
export type ClusterDict = { readonly [jobName: string]: JobTasks };

/** A `ClusterDef` as a plain object (the shape of the protobuf message, without `$typeName`). */
export interface ClusterDefShape {
  readonly job: readonly { readonly name: string; readonly tasks: { readonly [taskIndex: number]: string } }[];
}

/** Everything a {@link ClusterSpec} can be built from. */
export type ClusterSpecLike = ClusterSpec | ClusterDict | ClusterDef | ClusterDefShape;

/** The tasks of a job with `undefined` in the holes of a sparse job (TensorFlow's `None`). */
export type JobTaskList = readonly (string | null)[];

/** A cluster: jobs (in the order given) and, for each, its tasks' addresses by index. */
export class ClusterSpec {
  /** job → (task index → address); jobs in the order they were given. */
  readonly #jobs: ReadonlyMap<string, ReadonlyMap<number, string>>;

  /**
   * Builds a spec from an object (`{ worker: ["a:1", "b:1"] }`, or sparse
   * `{ worker: { 1: "b:1" } }`), a `ClusterDef` (message or plain `{ job: [...] }`), or another
   * spec (copied).
   *
   * @throws TypeError for anything else, a job's tasks that are neither a list nor an object,
   *   or an address that is not a string (TensorFlow's messages).
   * @throws ValueError for a task index that is not an integer >= 0.
   */
  constructor(cluster: ClusterSpecLike) {
    if (cluster instanceof ClusterSpec) {
      // TensorFlow copies through the ClusterDef, so a copy lists its jobs sorted.
      this.#jobs = fromClusterDef(cluster.asClusterDef());
    } else if (isClusterDef(cluster)) {
      this.#jobs = fromClusterDef(cluster);
    } else if (isPlainObject(cluster)) {
      this.#jobs = fromDict(cluster as ClusterDict);
    } else {
      throw new TypeError(
        "`cluster` must be a dictionary mapping one or more job names to lists of network addresses, or a `ClusterDef` protocol buffer",
      );
    }
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** The job names, in the order given. */
  get jobs(): string[] {
    return [...this.#jobs.keys()];
  }

  /** `true` when the cluster has no job (TensorFlow's `bool(cluster_spec)` is `false`). */
  get isEmpty(): boolean {
    return this.#jobs.size === 0;
  }

  /** The number of tasks of `jobName`. @throws ValueError for an unknown job. */
  numTasks(jobName: string): number {
    return this.#job(jobName).size;
  }

  /** The task indices of `jobName`, sorted. @throws ValueError for an unknown job. */
  taskIndices(jobName: string): number[] {
    return [...this.#job(jobName).keys()].sort((a, b) => a - b);
  }

  /** The address of one task. @throws ValueError for an unknown job or task. */
  taskAddress(jobName: string, taskIndex: number): string {
    const address = this.#job(jobName).get(taskIndex);
    if (address === undefined) {
      throw new ValueError(`No task with index ${pyRepr(taskIndex)} in job ${pyRepr(jobName)}`);
    }
    return address;
  }

  /**
   * The addresses of `jobName` as a list indexed by task, `null` in the holes of a sparse job
   * (TensorFlow's `None`; JSON-safe), so its length is the highest index + 1, not the number of tasks.
   * @throws ValueError for an unknown job.
   */
  jobTasks(jobName: string): JobTaskList {
    const job = this.#job(jobName);
    const out: (string | null)[] = Array.from({ length: job.size === 0 ? 0 : Math.max(...job.keys()) + 1 }, () => null);
    for (const [i, address] of job) out[i] = address;
    return out;
  }

  /** A fresh plain object: dense jobs as lists, sparse jobs as `{ index: address }`, an empty job as `{}`. */
  asDict(): Record<string, JobTasks> {
    const out: Record<string, JobTasks> = {};
    for (const jobName of this.#jobs.keys()) {
      const indices = this.taskIndices(jobName);
      const dense = indices.length > 0 && (indices[indices.length - 1] as number) + 1 === indices.length;
      out[jobName] = dense
        ? (this.jobTasks(jobName) as string[])
        : Object.fromEntries(indices.map((i) => [i, this.taskAddress(jobName, i)]));
    }
    return out;
  }

  /** The `ClusterDef` message: jobs sorted by name, tasks by index. A fresh copy each call. */
  asClusterDef(): ClusterDef {
    return toClusterDef(this.#jobs);
  }

  /**
   * TensorFlow's `==`: the same jobs with the same tasks (job order does not matter). Another
   * spec is compared as such; a plain object is compared with the `{ job: { index: address } }`
   * form TensorFlow keeps inside (so `{ worker: ["a:1"] }`, a list, is not equal).
   */
  equals(other: unknown): boolean {
    if (other instanceof ClusterSpec) return sameJobs(this.#jobs, other.#jobs);
    if (!isPlainObject(other)) return false;
    const keys = Object.keys(other);
    if (keys.length !== this.#jobs.size) return false;
    return keys.every((jobName) => {
      const mine = this.#jobs.get(jobName);
      const theirs = other[jobName];
      if (mine === undefined || !isPlainObject(theirs)) return false;
      const entries = Object.entries(theirs);
      return entries.length === mine.size && entries.every(([k, v]) => mine.get(Number(k)) === v && String(Number(k)) === k);
    });
  }

  /** TensorFlow's `repr`: `ClusterSpec({'ps': ['a:1'], 'worker': {1: 'b:1'}})`, jobs sorted. */
  toString(): string {
    const dict = this.asDict();
    const items = Object.keys(dict)
      .sort()
      .map((k) => `${pyRepr(k)}: ${pyRepr(dict[k])}`);
    return `ClusterSpec({${items.join(", ")}})`;
  }

  #job(jobName: string): ReadonlyMap<number, string> {
    const job = this.#jobs.get(jobName);
    if (job === undefined) throw new ValueError(`No such job in cluster: ${pyRepr(jobName)}`);
    return job;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const isPlainObject = (u: unknown): u is Record<string, unknown> =>
  typeof u === "object" && u !== null && !Array.isArray(u) && (Object.getPrototypeOf(u) === Object.prototype || Object.getPrototypeOf(u) === null);

/** A `ClusterDef` message, or a plain object whose only key `job` holds job definitions (objects, not addresses). */
const isClusterDef = (u: unknown): u is ClusterDefShape => {
  if (isMessage(u, ClusterDefSchema)) return true;
  if (!isPlainObject(u)) return false;
  const keys = Object.keys(u);
  const job = u["job"];
  return (
    keys.length === 1 &&
    keys[0] === "job" &&
    Array.isArray(job) &&
    job.length > 0 &&
    job.every((j) => typeof j === "object" && j !== null && !Array.isArray(j) && "name" in j)
  );
};

const fromDict = (cluster: ClusterDict): Map<string, Map<number, string>> => {
  const jobs = new Map<string, Map<number, string>>();
  for (const [jobName, tasks] of Object.entries(cluster) as [string, unknown][]) {
    let job: Map<number, string>;
    if (Array.isArray(tasks)) {
      job = new Map(tasks.map((address: unknown, i) => [i, checkAddress(address)]));
    } else if (isPlainObject(tasks)) {
      job = new Map(Object.entries(tasks).map(([k, address]) => [taskIndexOf(jobName, k), checkAddress(address)]));
    } else {
      throw new TypeError(`The tasks for job ${pyRepr(jobName)} must be a list or a dictionary from integers to strings.`);
    }
    jobs.set(jobName, job);
  }
  return jobs;
};

const fromClusterDef = (def: ClusterDefShape): Map<string, Map<number, string>> => {
  const jobs = new Map<string, Map<number, string>>();
  for (const jobDef of def.job) {
    if (typeof jobDef.name !== "string") throw new TypeError(`Job name ${pyRepr(jobDef.name)} must be bytes or unicode`);
    const tasks: unknown = jobDef.tasks ?? {};
    if (!isPlainObject(tasks)) {
      throw new TypeError(`The tasks for job ${pyRepr(jobDef.name)} must be a list or a dictionary from integers to strings.`);
    }
    jobs.set(
      jobDef.name,
      new Map(Object.entries(tasks).map(([k, address]) => [taskIndexOf(jobDef.name, k), checkAddress(address)])),
    );
  }
  return jobs;
};

const toClusterDef = (jobs: ReadonlyMap<string, ReadonlyMap<number, string>>): ClusterDef =>
  create(ClusterDefSchema, {
    job: [...jobs.keys()].sort().map((name) => {
      const job = jobs.get(name) as ReadonlyMap<number, string>;
      const tasks: Record<number, string> = {};
      for (const i of [...job.keys()].sort((a, b) => a - b)) tasks[i] = job.get(i) as string;
      return create(JobDefSchema, { name, tasks });
    }),
  });

const checkAddress = (address: unknown): string => {
  if (typeof address !== "string") throw new TypeError(`Task address ${pyRepr(address)} must be bytes or unicode`);
  return address;
};

const INT32_MAX = 2 ** 31 - 1;

/** An object key as a task index: a canonical integer 0..2^31-1 (a protobuf `int32` key). */
const taskIndexOf = (jobName: string, key: string): number => {
  const i = Number(key);
  if (!/^\d+$/.test(key.trim()) || !Number.isSafeInteger(i) || i > INT32_MAX) {
    throw new ValueError(`Task index ${pyRepr(key)} of job ${pyRepr(jobName)} is not an integer from 0 to ${INT32_MAX}`);
  }
  return i;
};

const sameJobs = (
  a: ReadonlyMap<string, ReadonlyMap<number, string>>,
  b: ReadonlyMap<string, ReadonlyMap<number, string>>,
): boolean =>
  a.size === b.size &&
  [...a].every(([name, tasks]) => {
    const other = b.get(name);
    return other !== undefined && other.size === tasks.size && [...tasks].every(([i, address]) => other.get(i) === address);
  });

/** A value as Python's `repr` shows it, so messages read as TensorFlow's (`'worker'`, `None`, `[...]`). */
const pyRepr = (u: unknown): string => {
  if (u === undefined || u === null) return "None";
  if (typeof u === "string") return u.includes("'") && !u.includes('"') ? `"${u}"` : `'${u.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  if (typeof u === "boolean") return u ? "True" : "False";
  if (typeof u === "number" || typeof u === "bigint") return String(u);
  if (Array.isArray(u)) return `[${u.map(pyRepr).join(", ")}]`;
  if (typeof u === "object") {
    return `{${Object.entries(u)
      .map(([k, v]) => `${/^\d+$/.test(k) ? k : pyRepr(k)}: ${pyRepr(v)}`)
      .join(", ")}}`;
  }
  return String(u);
};
