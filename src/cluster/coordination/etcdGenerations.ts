/**
 * Generations of the etcd coordination backend: the chief opens a launch by incrementing the
 * `generation` counter (deleting every older launch's keys), each task claims its name for its
 * incarnation, waits until every task's `alive/` then `ready/` key is in the launch, and then
 * watches the generation (a peer's lost liveness, the cluster's error); a task re-joining a
 * replica group watches its chief's liveness meanwhile. A newer generation supersedes the one a
 * task is in.
 *
 * @module
 */

import type { Etcd3, IKeyValue, Watcher } from "etcd3";
import { AbortedError, DeadlineExceededError, ErrorCode, type OpError, UnavailableError } from "../../errors.js";
import { ErrorLatch } from "./ErrorLatch.js";
import { dec, enc, type EtcdKeys, isGeneration, parseGeneration, storedError } from "./etcdKeys.js";
import { insertIfAbsent, waitUntil, type EtcdTaskContext } from "./etcdOps.js";
import { ETCD_GONE, type Status } from "./status.js";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Opens the next generation (the chief, at `connect()`): increments the counter and deletes
 * every older launch's keys, in one transaction retried until no other writer came between;
 * with `newLaunch` (the chief's first generation in its process) an old launch's final report
 * goes too. Resolves with the new generation.
 */
export const startGeneration = async (etcd: Etcd3, keys: EtcdKeys, newLaunch: boolean): Promise<number> => {
  const key = keys.generation;
  for (;;) {
    const r = await etcd.get(key).exec();
    const kv = r.kvs[0];
    const next = kv === undefined ? 1 : parseGeneration(kv) + 1;
    const txn = kv === undefined ? etcd.if(key, "Create", "==", 0) : etcd.if(key, "Mod", "==", kv.mod_revision);
    // A chief's first generation in its process is a new launch: an old launch's final report goes.
    const cleanup = newLaunch ? [etcd.delete().key(keys.final)] : [];
    const done = await txn
      .then(etcd.put(key).value(String(next)), etcd.delete().prefix(keys.generations), ...cleanup)
      .commit();
    if (done.succeeded) return next;
  }
};

/**
 * Waits until every task has a key under `g/<gen>/<dir>/`: `alive` (its liveness key) or
 * `ready` (it saw every liveness key; `confirmedAt` is the revision of this task's own ready
 * key). Returns the revision it saw them at, and the generation's error if it was recorded
 * after `confirmedAt`.
 */
export const waitForAll = async (
  context: EtcdTaskContext,
  gen: number,
  dir: "alive" | "ready",
  deadline: number,
  confirmedAt = "0",
): Promise<{ revision: string; lateError: OpError | undefined }> => {
  const { keys, clock, task, tasks, timeouts } = context;
  const prefix = keys.inGeneration(gen, `${dir}/`);
  // The ready wait also reads the generation's error: a generation that failed before this task
  // confirmed never completes (a task that joins one waits for the next, as it does for a dead
  // launch's). An error recorded after it confirmed is this launch's: a peer that saw every
  // ready key first already reported it. Registration completes, and the error is raised by
  // this task's first call.
  const watched = dir === "alive" ? prefix : keys.inGeneration(gen, "");
  const errorKey = keys.inGeneration(gen, "error");
  const timeoutMs = deadline - clock.now();
  let revision = "0";
  let failed: OpError | undefined;
  let lateError: OpError | undefined;
  const missing = (kvs: IKeyValue[]): string[] => {
    const stored = kvs.find((kv) => kv.key.toString() === errorKey);
    const error = stored === undefined ? undefined : storedError(stored);
    const late = stored !== undefined && BigInt(stored.mod_revision) > BigInt(confirmedAt);
    failed = late ? undefined : error;
    lateError = late ? error : undefined;
    const present = new Set(
      kvs.filter((kv) => kv.key.toString().startsWith(prefix)).map((kv) => dec(kv.key.toString().slice(prefix.length))),
    );
    return tasks.filter((t) => !present.has(t));
  };
  let last: string[] = [...tasks];
  // A task of a new launch may have joined the previous launch's generation (its chief not
  // started yet): when the new chief starts its generation (deleting this one's keys), stop
  // waiting with AbortedError, so that the task registers again in the new generation.
  const stop = new AbortController();
  const generationKey = keys.generation;
  // Its own deadline comes after the registration's, which names the missing tasks.
  const superseded = waitUntil(
    context,
    generationKey,
    false,
    timeoutMs + timeouts.heartbeatTimeoutMs,
    (kvs) => {
      const kv = kvs.find((k) => k.key.toString() === generationKey);
      return kv === undefined || kv.value.toString() !== String(gen) ? true : undefined;
    },
    () => new DeadlineExceededError(`registration timed out after ${timeouts.registrationTimeoutMs} ms`),
    stop.signal,
  ).then(() => {
    throw supersededError(task, gen);
  });
  const all = waitUntil(
    context,
    watched,
    true,
    timeoutMs,
    (kvs, rev) => {
      last = missing(kvs);
      revision = rev;
      return last.length === 0 && failed === undefined ? true : undefined;
    },
    () =>
      new DeadlineExceededError(
        dir === "alive"
          ? `registration timed out after ${timeouts.registrationTimeoutMs} ms: ${tasks.length - last.length}/${tasks.length} tasks registered; missing: ${last.join(", ")}`
          : failed !== undefined
            ? `registration timed out after ${timeouts.registrationTimeoutMs} ms: generation ${gen} had failed (${failed.message}) and no chief started a new one`
            : `registration timed out after ${timeouts.registrationTimeoutMs} ms in generation ${gen}: every task's liveness key was there, but ${last.join(", ")} never confirmed the registration (tasks of an earlier launch that died less than a heartbeat timeout ago, whose chief has not started a new generation)`,
      ),
    stop.signal,
  );
  // The loser is cancelled by the abort: its rejection is nobody's failure.
  superseded.catch(() => undefined);
  all.catch(() => undefined);
  try {
    await Promise.race([all, superseded]);
  } finally {
    stop.abort(new AbortedError("registration wait cancelled"));
  }
  return { revision, lateError };
};

/**
 * Watches the chief's liveness key in generation `gen` (the chief records its name there as
 * `g/<gen>/chief` when it claims its task): the returned latch is set to `UnavailableError`
 * naming the chief, while `gen` is still the current generation (a chief that opened a newer
 * one is alive), once its key was deleted (its lease expired), or once the key has not been
 * there for `timeoutMs` since the watch started (it never attached one). `stop()` ends the
 * watch.
 */
export const watchChief = (context: EtcdTaskContext, gen: number, timeoutMs: number): ErrorLatch & { stop(): void } => {
  const { etcd, keys, clock, timeouts } = context;
  const latch = new ErrorLatch();
  const stop = new AbortController();
  const base = keys.inGeneration(gen, "");
  const generationKey = keys.generation;
  let timer: { cancel(): void } | undefined;
  let seen = false;
  let chief = "the chief";
  const onTimeout = (): void => {
    // A newer generation deleted this one's keys: the chief opened it, it is alive.
    void etcd
      .get(generationKey)
      .string()
      .then((current) => {
        if (stop.signal.aborted || !isGeneration(current, gen)) return;
        latch.set(
          new UnavailableError(
            seen
              ? `task ${chief} declared failed: its liveness lease in generation ${gen} expired, no heartbeat within the heartbeat timeout; the replica group cannot re-form without its chief`
              : `task ${chief} declared failed: no liveness key of it in etcd for ${timeoutMs} ms in generation ${gen}; the replica group cannot re-form without its chief`,
            { failure: { kind: "declaredFailed", tasks: [chief] } },
          ),
        );
      }, () => undefined);
  };
  waitUntil(
    context,
    base,
    true,
    timeouts.registrationTimeoutMs + timeoutMs,
    (kvs) => {
      const name = kvs.find((kv) => kv.key.toString() === `${base}chief`)?.value.toString();
      if (name !== undefined) chief = name;
      const alive = name !== undefined && kvs.some((kv) => kv.key.toString() === `${base}alive/${enc(name)}`);
      if (alive) {
        seen = true;
        timer?.cancel();
        timer = undefined;
      } else if (seen) {
        onTimeout();
      } else {
        timer ??= clock.setTimer(timeoutMs, onTimeout);
      }
      return undefined;
    },
    () => new DeadlineExceededError(`watch of the chief's liveness in generation ${gen} ended`),
    stop.signal,
  ).catch(() => undefined);
  return Object.assign(latch, {
    stop: () => {
      timer?.cancel();
      stop.abort(new AbortedError("chief watch stopped"));
    },
  });
};

/** Claims this task's name for this incarnation in `gen`; a different incarnation there is a restart. */
export const claimTask = async (context: EtcdTaskContext, gen: number, isChief: boolean): Promise<void> => {
  const { etcd, keys, task, incarnation } = context;
  const key = keys.inGeneration(gen, `tasks/${enc(task)}`);
  const claim = [etcd.put(key).value(incarnation), ...(isChief ? [etcd.put(keys.inGeneration(gen, "chief")).value(task)] : [])];
  const r = await etcd
    .if(key, "Create", "==", 0)
    .then(...claim)
    .else(etcd.get(key))
    .commit();
  if (r.succeeded) return;
  const known = r.responses[0]?.response_range?.kvs[0]?.value.toString();
  if (known === undefined || known === incarnation) return;
  const gone: Status = {
    code: ErrorCode.UNAVAILABLE,
    message: `task ${task} restarted (incarnation ${known} is gone, ${incarnation} registered); the cluster must restart`,
    failure: { kind: "declaredFailed", tasks: [task] },
  };
  await insertIfAbsent(etcd, keys.inGeneration(gen, "error"), JSON.stringify(gone));
  throw new AbortedError(
    `task ${task} restarted (new incarnation ${incarnation}) in generation ${gen}, where incarnation ${known} was registered; it cannot rejoin silently`,
  );
};

/**
 * Watches the generation from `revision`: a peer's liveness key deleted without a `left/`
 * mark is a failure (published as the cluster's error), the cluster's error is latched, and
 * a newer generation (the chief restarted) aborts this one. `track` takes the watches (the
 * client cancels them when liveness stops).
 */
export const watchGeneration = async (
  context: EtcdTaskContext,
  gen: number,
  revision: string,
  latch: (e: OpError) => void,
  track: (...watchers: Watcher[]) => void,
): Promise<void> => {
  const { etcd, keys, task, tasks } = context;
  const base = keys.inGeneration(gen, "");
  const next = String(BigInt(revision) + 1n);
  const w = await etcd.watch().prefix(base).startRevision(next).create();
  const g = await etcd.watch().key(keys.generation).startRevision(next).create();
  track(w, g);
  w.on("error", () => {});
  g.on("error", () => {});
  w.on("put", (kv) => {
    if (kv.key.toString() === `${base}error`) latch(storedError(kv));
  });
  w.on("delete", (kv) => {
    const key = kv.key.toString();
    if (key.startsWith(`${base}alive/`)) void onAliveDeleted(context, gen, dec(key.slice(`${base}alive/`.length)), latch);
    else if (key.startsWith(`${base}tasks/`)) latch(supersededError(task, gen));
  });
  g.on("put", (kv) => {
    if (!isGeneration(kv.value.toString(), gen)) latch(supersededError(task, gen));
  });
  // Keys deleted before the watch started (a peer that died while this task registered).
  const alive = await etcd.getAll().prefix(`${base}alive/`).keys();
  const aliveTasks = new Set(alive.map((k) => dec(k.slice(`${base}alive/`.length))));
  for (const t of tasks) if (!aliveTasks.has(t)) void onAliveDeleted(context, gen, t, latch);
};

/** A peer's liveness key was deleted: its failure, unless it left or a newer generation deleted it. */
const onAliveDeleted = async (context: EtcdTaskContext, gen: number, task: string, latch: (e: OpError) => void): Promise<void> => {
  const { etcd, keys, timeouts, hosts } = context;
  try {
    // A new generation deletes the old one's keys: that is not a failure of the task.
    const current = await etcd.get(keys.generation).string();
    if (!isGeneration(current, gen)) return latch(supersededError(context.task, gen));
    const left = await etcd.get(keys.inGeneration(gen, `left/${enc(task)}`)).string();
    if (left !== null) return;
    const failed: Status = {
      code: ErrorCode.UNAVAILABLE,
      message: `task ${task} declared failed: its liveness lease expired, no heartbeat within the heartbeat timeout (${timeouts.heartbeatTimeoutMs} ms); failed, preempted or crashed`,
      failure: { kind: "declaredFailed", tasks: [task] },
    };
    await insertIfAbsent(etcd, keys.inGeneration(gen, "error"), JSON.stringify(failed));
    // The watch delivers the error; latch it here too in case it already fired.
    const stored = (await etcd.get(keys.inGeneration(gen, "error")).exec()).kvs[0];
    if (stored !== undefined) latch(storedError(stored));
  } catch (e) {
    latch(new UnavailableError(`etcd (${hosts.join(", ")}) failed: ${e instanceof Error ? e.message : String(e)}`, { failure: ETCD_GONE }));
  }
};

/** The error of a task whose generation `gen` was superseded by a newer one. */
const supersededError = (task: string, gen: number): AbortedError =>
  new AbortedError(`generation ${gen} ended: the chief restarted and started a new generation; task ${task} must connect again`);
