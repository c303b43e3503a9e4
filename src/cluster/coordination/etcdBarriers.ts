/**
 * Barriers of the etcd coordination backend, under `g/<n>/barrier/<id>/`: the first task to
 * arrive records the barrier's task list (a task naming another list fails it), each task marks
 * its arrival, and the first task that sees every arrival, or that sees its deadline pass,
 * records the barrier's outcome (`ok`, or the error naming the stragglers), which every task
 * raises.
 *
 * @module
 */

import { DeadlineExceededError, ErrorCode, InvalidArgumentError } from "../../errors.js";
import { dec, enc } from "./etcdKeys.js";
import { insertIfAbsent, waitUntil, type EtcdTaskContext } from "./etcdOps.js";
import { decodeStatusJson, fromStatus, type Status } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

type Outcome = { readonly ok: true } | Status;

/** A barrier's recorded success. */
const OK = "ok";

/** The barrier every task passes in `shutdown()`. */
export const SHUTDOWN_BARRIER = "monitored-session/shutdown";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Arrives at barrier `id` of generation `gen` with `tasks` (sorted) and waits for its outcome;
 * the deadline `timeoutMs` runs from this task's arrival.
 *
 * @throws the recorded outcome's error: InvalidArgumentError, DeadlineExceededError naming the stragglers.
 */
export const arrive = async (context: EtcdTaskContext, gen: number, id: string, tasks: readonly string[], timeoutMs: number): Promise<void> => {
  const { etcd, keys, clock, task, incarnation, timeouts } = context;
  if (!tasks.includes(task)) {
    throw new InvalidArgumentError(`barrier ${JSON.stringify(id)}: task ${task} is not one of its tasks (${tasks.join(", ")})`);
  }
  const base = keys.inGeneration(gen, `barrier/${enc(id)}/`);
  const tasksJson = JSON.stringify(tasks);
  const claimed = await etcd
    .if(`${base}tasks`, "Create", "==", 0)
    .then(etcd.put(`${base}tasks`).value(tasksJson), etcd.put(`${base}first`).value(task))
    .else(etcd.get(`${base}tasks`))
    .commit();
  const known = claimed.succeeded ? tasksJson : claimed.responses[0]?.response_range?.kvs[0]?.value.toString();
  if (known !== tasksJson) {
    await insertIfAbsent(
      etcd,
      `${base}outcome`,
      JSON.stringify({
        code: ErrorCode.INVALID_ARGUMENT,
        message: `barrier ${JSON.stringify(id)}: task ${task} names tasks [${tasks.join(", ")}] but another task named ${known ?? "none"}`,
      } satisfies Status),
    );
  } else {
    await etcd.put(`${base}arrived/${enc(task)}`).value(incarnation);
  }
  const outcomeKey = `${base}outcome`;
  // The deadline runs from this task's arrival; at it, a `tick/` write wakes the waiter below,
  // which records the timeout (the first arrival's deadline comes first).
  let timedOut = false;
  const timer = clock.setTimer(timeoutMs, () => {
    timedOut = true;
    void etcd.put(`${base}tick/${enc(task)}`).value("1").catch(() => {});
  });
  const outcome = await waitUntil<Outcome>(
    context,
    base,
    true,
    timeoutMs + timeouts.heartbeatTimeoutMs,
    (kvs) => {
      const stored = kvs.find((kv) => kv.key.toString() === outcomeKey);
      if (stored !== undefined) {
        const text = stored.value.toString();
        return text === OK ? { ok: true } : decodeStatusJson(text, `etcd key ${outcomeKey}`);
      }
      const arrived = new Set(
        kvs.filter((kv) => kv.key.toString().startsWith(`${base}arrived/`)).map((kv) => dec(kv.key.toString().slice(`${base}arrived/`.length))),
      );
      const stragglers = tasks.filter((t) => !arrived.has(t));
      if (stragglers.length === 0) void insertIfAbsent(etcd, outcomeKey, OK);
      else if (timedOut) {
        const first = kvs.find((kv) => kv.key.toString() === `${base}first`)?.value.toString() ?? "?";
        void insertIfAbsent(
          etcd,
          outcomeKey,
          JSON.stringify({
            code: ErrorCode.DEADLINE_EXCEEDED,
            message: `barrier ${JSON.stringify(id)} timed out after ${timeoutMs} ms: ${arrived.size}/${tasks.length} tasks arrived (first: ${first}); stragglers: ${stragglers.join(", ")}`,
          } satisfies Status),
        );
      }
      return undefined;
    },
    () => new DeadlineExceededError(`barrier ${JSON.stringify(id)}: no outcome recorded in etcd within ${timeoutMs} ms`),
  ).finally(() => timer.cancel());
  if ("ok" in outcome) return;
  throw fromStatus(outcome);
};
