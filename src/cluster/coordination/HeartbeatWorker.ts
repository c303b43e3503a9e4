/**
 * Heartbeats on their own thread. A task's training step is synchronous (a TensorFlow.js
 * kernel, a checkpoint write); if heartbeats ran on the main event loop, a step longer than the
 * heartbeat interval would get a live task declared failed. A `worker_threads` thread keeps
 * beating whatever the main thread does, and reports the first rejection back to it.
 *
 * The thread's code is plain JavaScript passed with `eval: true`: it runs unchanged under tsx,
 * vitest and the built package, with no loader in the thread. It needs only Node and, for etcd,
 * the `etcd3` package (its path is resolved by the main thread).
 *
 * @module
 */

import { createRequire } from "node:module";
import { type MessagePort, type Transferable, Worker } from "node:worker_threads";
import { systemClock } from "../../Clock.js";
import { ErrorCode, type OpError, UnavailableError } from "../../errors.js";
import type { CallerIdentity } from "./EmbeddedCoordinationService.js";
import { fromStatus, type Status } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Messages from the thread. */
type FromThread =
  | { readonly type: "ready" }
  | { readonly type: "error"; readonly status: Status }
  | { readonly type: "stopped" };

/** What the etcd heartbeat thread needs. */
export interface EtcdHeartbeatData {
  readonly hosts: readonly string[];
  readonly ttlSecs: number;
  /** The liveness key, attached to the thread's lease. */
  readonly aliveKey: string;
  readonly incarnation: string;
  readonly intervalMs: number;
  /** etcd unreachable for this long is reported as `UnavailableError` naming etcd. */
  readonly timeoutMs: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const EMBEDDED_SCRIPT = `
const { parentPort, workerData } = require("node:worker_threads");
const { port, intervalMs } = workerData;
let id = 0;
let identity;
let timer;
let stopped = false;
// Also before "begin": the client counts this thread's errors from its start.
const fail = (status) => {
  if (stopped) return;
  stopped = true;
  clearInterval(timer);
  parentPort.postMessage({ type: "error", status });
};
port.on("message", (msg) => { if (msg.status !== undefined) fail(msg.status); });
port.on("close", () => fail({ code: ${ErrorCode.UNAVAILABLE}, message: "the coordination service's port closed (its host stopped)" }));
const beat = () => port.postMessage({ id: id++, method: "heartbeat", request: identity });
parentPort.on("message", (msg) => {
  if (msg.type === "begin") {
    if (stopped) return;
    identity = msg.identity;
    timer = setInterval(beat, intervalMs);
    beat();
    return;
  }
  stopped = true;
  clearInterval(timer);
  port.close();
  parentPort.postMessage({ type: "stopped" });
});
parentPort.postMessage({ type: "ready" });
`;

const ETCD_SCRIPT = `
const { parentPort, workerData } = require("node:worker_threads");
const { Etcd3, EtcdLeaseInvalidError } = require(workerData.etcd3Path);
const { hosts, ttlSecs, aliveKey, incarnation, intervalMs, timeoutMs } = workerData;
const client = new Etcd3({ hosts, dialTimeout: intervalMs });
const lease = client.lease(ttlSecs, { autoKeepAlive: false });
lease.on("lost", () => {});
let lastOk = Date.now();
let stopped = false;
let timer;
const fail = (message) => {
  if (stopped) return;
  stopped = true;
  clearTimeout(timer);
  parentPort.postMessage({ type: "error", status: { code: ${ErrorCode.UNAVAILABLE}, message } });
};
const beat = async () => {
  try {
    await lease.keepaliveOnce({ deadline: Date.now() + intervalMs });
    lastOk = Date.now();
  } catch (e) {
    if (e instanceof EtcdLeaseInvalidError) {
      return fail("this task's liveness lease expired: the cluster declared it failed (it was stopped or cut off for longer than the heartbeat timeout)");
    }
    if (Date.now() - lastOk > timeoutMs) {
      return fail("etcd (" + hosts.join(", ") + ") unreachable for " + (Date.now() - lastOk) + " ms (heartbeat timeout " + timeoutMs + " ms): " + e.message);
    }
  }
  if (!stopped) timer = setTimeout(beat, intervalMs);
};
lease.put(aliveKey).value(incarnation).exec().then(
  () => {
    lastOk = Date.now();
    parentPort.postMessage({ type: "ready" });
    timer = setTimeout(beat, intervalMs);
  },
  (e) => fail("could not register this task's liveness with etcd (" + hosts.join(", ") + "): " + e.message),
);
parentPort.on("message", async (msg) => {
  stopped = true;
  clearTimeout(timer);
  if (msg.revoke) {
    try { await lease.revoke({ deadline: Date.now() + 2000 }); } catch {}
  }
  client.close();
  parentPort.postMessage({ type: "stopped" });
});
`;

/** A heartbeat thread. */
export class HeartbeatWorker {
  private constructor(
    private readonly worker: Worker,
    private readonly stopped: Promise<void>,
  ) {}

  /**
   * Starts a thread that will beat to an embedded service through `port` (see
   * `openServicePort`) every `intervalMs`, once {@link begin} gives it the task's identity.
   * Started before the task registers, so that a thread slow to start (seconds on a loaded
   * machine) does not eat into the first heartbeat's deadline. `onError` gets the first
   * rejection (the cluster's error, or a lost service).
   */
  static embedded(port: MessagePort, intervalMs: number, onError: (error: OpError) => void): Promise<HeartbeatWorker> {
    return HeartbeatWorker.start(EMBEDDED_SCRIPT, { port, intervalMs }, [port], onError);
  }

  /** Starts beating as `identity` (the embedded thread: the first heartbeat goes out at once). */
  begin(identity: CallerIdentity): void {
    this.worker.postMessage({ type: "begin", identity });
  }

  /** Grants an etcd lease, attaches `data.aliveKey` to it and keeps it alive. */
  static etcd(data: EtcdHeartbeatData, onError: (error: OpError) => void): Promise<HeartbeatWorker> {
    const etcd3Path = createRequire(import.meta.url).resolve("etcd3");
    return HeartbeatWorker.start(ETCD_SCRIPT, { ...data, hosts: [...data.hosts], etcd3Path }, [], onError);
  }

  private static start(
    script: string,
    workerData: unknown,
    transferList: Transferable[],
    onError: (error: OpError) => void,
    startTimeoutMs = 10_000,
  ): Promise<HeartbeatWorker> {
    const worker = new Worker(script, { eval: true, workerData, transferList });
    worker.unref();
    let onStopped: () => void = () => {};
    const stopped = new Promise<void>((resolve) => (onStopped = resolve));
    return new Promise<HeartbeatWorker>((resolve, reject) => {
      let started = false;
      const timer = systemClock.setTimer(startTimeoutMs, () => {
        void worker.terminate();
        reject(new UnavailableError(`the heartbeat thread did not start within ${startTimeoutMs} ms`));
      });
      worker.on("message", (msg: FromThread) => {
        if (msg.type === "ready") {
          started = true;
          timer.cancel();
          resolve(new HeartbeatWorker(worker, stopped));
        } else if (msg.type === "error") {
          const error = fromStatus(msg.status);
          if (started) onError(error);
          else {
            timer.cancel();
            void worker.terminate();
            reject(error);
          }
        } else onStopped();
      });
      worker.on("error", (e) => {
        timer.cancel();
        const error = new UnavailableError(`the heartbeat thread crashed: ${e.message}`);
        if (started) onError(error);
        else reject(error);
      });
      worker.on("exit", onStopped);
    });
  }

  /**
   * Stops beating and ends the thread (at most `timeoutMs`). For etcd, `revoke` deletes the
   * liveness key at once; without it the lease runs out.
   */
  async stop(options: { revoke?: boolean; timeoutMs?: number } = {}): Promise<void> {
    const timeoutMs = options.timeoutMs ?? 5_000;
    this.worker.postMessage({ type: "stop", revoke: options.revoke ?? false });
    let timer: { cancel(): void } | undefined;
    await Promise.race([this.stopped, new Promise<void>((r) => (timer = systemClock.setTimer(timeoutMs, r)))]);
    timer?.cancel();
    await this.worker.terminate();
  }
}
