/**
 * Heartbeats on their own thread. A task's training step is synchronous (a TensorFlow.js
 * kernel, a checkpoint write); if heartbeats ran on the main event loop, a step longer than the
 * heartbeat interval would get a live task declared failed. A `worker_threads` thread keeps
 * beating whatever the main thread does, and reports the first rejection back to it.
 *
 * The thread's code is plain JavaScript passed with `eval: true`: it runs unchanged under tsx,
 * vitest and the built package, with no loader in the thread. It needs only Node and, for etcd,
 * Node: the etcd thread speaks to etcd's JSON gateway over `node:http`.
 *
 * @module
 */

import { type MessagePort, type Transferable, Worker } from "node:worker_threads";
import { systemClock } from "../../time/Clock.js";
import { ErrorCode, type OpError, UnavailableError } from "../../errors.js";
import type { CallerIdentity } from "./EmbeddedCoordinationService.js";
import { errorOf } from "./portTransport.js";
import { EMBEDDED_SERVICE_GONE, ETCD_GONE, type Status } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Messages from the thread. */
type FromThread =
  | { readonly type: "ready" }
  | { readonly type: "error"; readonly status: Status }
  | { readonly type: "attached" }
  | { readonly type: "attachFailed"; readonly status: Status }
  | { readonly type: "stopped" };

/** What the etcd heartbeat thread needs. */
export interface EtcdHeartbeatData {
  /** The task's name, for the error that says it was declared failed. */
  readonly task: string;
  readonly hosts: readonly string[];
  readonly ttlSecs: number;
  /** The value of the liveness key (see {@link HeartbeatWorker.attach}). */
  readonly incarnation: string;
  readonly intervalMs: number;
  /** etcd unreachable for this long is reported as `UnavailableError` naming etcd. */
  readonly timeoutMs: number;
}

/** What a task that lost etcd for longer than the heartbeat timeout tells its user to do. */
export const ETCD_LOST_FIX = "start etcd again on its data dir and client URLs (or fix cluster.etcdEndpoints), then start the tasks again";

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
port.on("close", () => fail({ code: ${ErrorCode.UNAVAILABLE}, message: "the coordination service's port closed (its host stopped)", failure: ${JSON.stringify(EMBEDDED_SERVICE_GONE)} }));
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

// etcd's JSON gateway (/v3/..., served on every client URL) over Node's own http: the thread
// loads no etcd or gRPC client, so it starts in tens of milliseconds where loading etcd3 and
// grpc-js in a new thread took about a second (measured), all of it in every task's startup.
const ETCD_SCRIPT = `
const { parentPort, workerData } = require("node:worker_threads");
const http = require("node:http");
const https = require("node:https");
const { task, hosts, ttlSecs, incarnation, intervalMs, timeoutMs } = workerData;
const agents = { "http:": new http.Agent({ keepAlive: true }), "https:": new https.Agent({ keepAlive: true }) };
let host = 0;
const post = (path, body, deadlineMs) => new Promise((resolve, reject) => {
  const url = new URL(path, hosts[host % hosts.length]);
  const mod = url.protocol === "https:" ? https : http;
  const req = mod.request(url, { method: "POST", agent: agents[url.protocol], headers: { "content-type": "application/json" } }, (res) => {
    let text = "";
    res.setEncoding("utf8");
    res.on("data", (d) => (text += d));
    res.on("end", () => {
      clearTimeout(timer);
      let json;
      try { json = JSON.parse(text.split("\\n")[0]); } catch { json = undefined; }
      if (res.statusCode !== 200 || json === undefined) return reject(new Error(path + ": " + (json?.message ?? "HTTP " + res.statusCode + " " + text.slice(0, 200))));
      resolve(json);
    });
  });
  const timer = setTimeout(() => req.destroy(new Error(path + ": no answer within " + deadlineMs + " ms")), deadlineMs);
  req.on("error", (e) => {
    clearTimeout(timer);
    host += 1; // the next call tries the next endpoint
    reject(e);
  });
  req.end(JSON.stringify(body));
});
const b64 = (s) => Buffer.from(s).toString("base64");
let lease;
let lastOk = Date.now();
let stopped = false;
let timer;
const fail = (message, failure) => {
  if (stopped) return;
  stopped = true;
  clearTimeout(timer);
  parentPort.postMessage({ type: "error", status: { code: ${ErrorCode.UNAVAILABLE}, message, failure } });
};
const beat = async () => {
  try {
    const r = await post("/v3/lease/keepalive", { ID: lease }, intervalMs);
    // A lease that expired (or was revoked) comes back without a TTL. The same words as the
    // peers' verdict (EtcdCoordinationClient), which this may beat to the task after a freeze.
    if (!(Number(r.result?.TTL ?? 0) > 0)) {
      return fail("task " + task + " declared failed: its liveness lease expired (this task was stopped or cut off from etcd for longer than the heartbeat timeout)", { kind: "declaredFailed", tasks: [task] });
    }
    lastOk = Date.now();
  } catch (e) {
    if (Date.now() - lastOk > timeoutMs) {
      return fail("etcd (" + hosts.join(", ") + ") unreachable for " + (Date.now() - lastOk) + " ms (heartbeat timeout " + timeoutMs + " ms; " + e.message + "): " + ${JSON.stringify(ETCD_LOST_FIX)}, ${JSON.stringify(ETCD_GONE)});
    }
  }
  if (!stopped) timer = setTimeout(beat, intervalMs);
};
post("/v3/lease/grant", { TTL: ttlSecs }, timeoutMs).then(
  (r) => {
    lease = r.ID;
    lastOk = Date.now();
    parentPort.postMessage({ type: "ready" });
    timer = setTimeout(beat, intervalMs);
  },
  (e) => fail("could not get a liveness lease from etcd (" + hosts.join(", ") + "): " + e.message),
);
parentPort.on("message", async (msg) => {
  if (msg.type === "attach") {
    try {
      await post("/v3/kv/put", { key: b64(msg.key), value: b64(incarnation), lease }, timeoutMs);
      parentPort.postMessage({ type: "attached" });
    } catch (e) {
      parentPort.postMessage({ type: "attachFailed", status: { code: ${ErrorCode.UNAVAILABLE}, message: "could not register this task's liveness with etcd (" + hosts.join(", ") + "): " + e.message } });
    }
    return;
  }
  stopped = true;
  clearTimeout(timer);
  if (msg.revoke && lease !== undefined) {
    try { await post("/v3/lease/revoke", { ID: lease }, 2000); } catch {}
  }
  for (const agent of Object.values(agents)) agent.destroy();
  parentPort.postMessage({ type: "stopped" });
});
`;

/** A heartbeat thread. */
export class HeartbeatWorker {
  /** The pending {@link attach}, settled by the thread's answer. */
  private attaching: { resolve(): void; reject(e: OpError): void } | undefined;

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

  /** etcd: puts the liveness `key` (the incarnation) on the thread's lease. */
  attach(key: string): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.attaching = { resolve, reject };
      this.worker.postMessage({ type: "attach", key });
    });
  }

  /** Starts beating as `identity` (the embedded thread: the first heartbeat goes out at once). */
  begin(identity: CallerIdentity): void {
    this.worker.postMessage({ type: "begin", identity });
  }

  /**
   * Grants an etcd lease and keeps it alive; resolves once it is granted. The task's liveness
   * key is attached to it later ({@link attach}), once the task knows its generation.
   */
  static etcd(data: EtcdHeartbeatData, onError: (error: OpError) => void): Promise<HeartbeatWorker> {
    return HeartbeatWorker.start(ETCD_SCRIPT, { ...data, hosts: [...data.hosts] }, [], onError);
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
      let started: HeartbeatWorker | undefined;
      const timer = systemClock.setTimer(startTimeoutMs, () => {
        void worker.terminate();
        reject(new UnavailableError(`the heartbeat thread did not start within ${startTimeoutMs} ms`));
      });
      worker.on("message", (msg: FromThread) => {
        if (msg.type === "ready") {
          started = new HeartbeatWorker(worker, stopped);
          timer.cancel();
          resolve(started);
        } else if (msg.type === "attached" || msg.type === "attachFailed") {
          const attaching = started?.attaching;
          if (started !== undefined) started.attaching = undefined;
          if (msg.type === "attached") attaching?.resolve();
          else attaching?.reject(errorOf(msg.status));
        } else if (msg.type === "error") {
          const error = errorOf(msg.status);
          if (started !== undefined) onError(error);
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
        if (started !== undefined) onError(error);
        else reject(error);
      });
      worker.on("exit", () => {
        started?.attaching?.reject(new UnavailableError("the heartbeat thread ended before it attached the liveness key"));
        onStopped();
      });
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
