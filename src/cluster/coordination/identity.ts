/**
 * Who is calling and in which launch: task names, incarnations (one per process start) and
 * generations (one per cluster launch) and the key namespace they give.
 *
 * @module
 */

import { createHash, randomBytes } from "node:crypto";
import { InvalidArgumentError } from "../../errors.js";
import type { ClusterSpec } from "../ClusterSpec.js";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** TensorFlow's task name, e.g. `/job:worker/replica:0/task:1`. */
export const taskName = (jobName: string, taskIndex: number): string =>
  `/job:${jobName}/replica:0/task:${taskIndex}`;

/** Every task of the cluster by its TensorFlow name, job by job in the order given, each job's tasks by index. */
export const taskNamesOf = (spec: ClusterSpec): string[] => spec.jobs.flatMap((job) => spec.taskIndices(job).map((i) => taskName(job, i)));

/** The chief's task name: `chief` 0, else `worker` 0 (TensorFlow's rule). */
export const chiefTaskOf = (spec: ClusterSpec): string => (spec.jobs.includes("chief") ? taskName("chief", 0) : taskName("worker", 0));

/** The chief's address: `chief` 0, else `worker` 0 (TensorFlow's rule). */
export const chiefAddressOf = (spec: ClusterSpec): string =>
  spec.jobs.includes("chief") ? spec.taskAddress("chief", 0) : spec.taskAddress("worker", 0);

/**
 * A short fingerprint of a cluster's jobs and addresses (16 hex digits of their SHA-256): the
 * same for every task of one TF_CONFIG cluster and across its restarts, another for another.
 */
export const clusterFingerprint = (spec: ClusterSpec): string => {
  const jobs = Object.entries(spec.asDict()).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return createHash("sha256").update(JSON.stringify(jobs)).digest("hex").slice(0, 16);
};

/**
 * A new incarnation id: a random 64-bit number, as a decimal string (it does not fit a JS
 * number). Each process start takes a new one, so a restarted task is never mistaken for the
 * one the cluster knew.
 */
export const newIncarnation = (): string => randomBytes(8).readBigUInt64BE().toString();

/**
 * This process's incarnation, drawn once when the process starts (loads this module). Every
 * coordination client of the process uses it unless told otherwise, and keeps it across
 * reconnects, so the service can tell a task that reconnects (the same process) from one that
 * restarted (a new process, a new id). The `Server`'s incarnation is the same number.
 */
export const processIncarnationId: string = newIncarnation();

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * Checks a user key (or directory): non-empty, no empty path segment, no leading slash.
 *
 * @throws InvalidArgumentError naming the key.
 */
export const checkKey = (key: string, what = "key"): string => {
  if (key.length === 0 || key.startsWith("/") || key.split("/").some((s, i, a) => s === "" && i < a.length - 1)) {
    throw new InvalidArgumentError(
      `coordination ${what} ${JSON.stringify(key)}: expected non-empty "/"-separated segments without a leading "/"`,
    );
  }
  return key;
};

