/**
 * One task of the `cluster-control` benchmark, in its own process. After its modules are loaded
 * it prints `{"event":"loaded"}` and waits for a `go` line on stdin, so that process start and
 * module loading stay out of the measurement. Then it prints, as JSON lines with timestamps of
 * the host clock (`performance.timeOrigin + performance.now()`, ms):
 *
 * - `start`: just before this task's `Server.start()`;
 * - `ready`: `connect()` resolved, i.e. every task of the cluster registered;
 * - `kv` (worker 0 with `kvOps`): the p50 of `kvOps` inserts and of `kvOps` gets, in µs;
 * - `error`: the error that ended its blocking get (a peer declared failed).
 *
 * Usage: node --import tsx bench/clusterTask.ts '<json args>' (see `Args`).
 */

import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import type { CoordinationClient } from "../src/cluster/coordination/CoordinationClient.js";
import { hostCoordinationService } from "../src/cluster/coordination/coordinationServer.js";
import { EtcdCoordinationClient } from "../src/cluster/coordination/EtcdCoordinationClient.js";
import { connectCoordinationService } from "../src/cluster/coordination/grpcCoordinationTransport.js";
import { taskName } from "../src/cluster/coordination/identity.js";
import { Server } from "../src/cluster/Server.js";
import type { Logger } from "../src/Logger.js";
import { median } from "./stats.js";

interface Args {
  readonly backend: "embedded" | "etcd";
  readonly role: "chief" | "worker";
  readonly index: number;
  readonly workers: number;
  readonly heartbeatTimeoutMs: number;
  /** Embedded: the chief's port (reserved by the parent, so workers know it before it serves). */
  readonly chiefPort?: number;
  /** etcd: endpoints and this launch's key prefix. */
  readonly etcdHosts?: readonly string[];
  readonly prefix?: string;
  /** Worker 0: how many inserts and gets to time (0: none). */
  readonly kvOps?: number;
}

const args = JSON.parse(process.argv[2] ?? "{}") as Args;
const now = (): number => performance.timeOrigin + performance.now();
const task = taskName(args.role, args.index);
const tasks = [taskName("chief", 0), ...Array.from({ length: args.workers }, (_, i) => taskName("worker", i))];
const timeouts = { heartbeatTimeoutMs: args.heartbeatTimeoutMs };
const isChief = args.role === "chief";
const chiefAddress = `127.0.0.1:${args.chiefPort ?? 0}`;
const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (m) => console.error(m) };
const print = (event: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify({ task, ...event })}\n`);
};
// No orphans: a child that the benchmark forgot ends by itself.
setTimeout(() => process.exit(3), 600_000);

/** Starts this task's server and its coordination client. */
const join = async (): Promise<CoordinationClient> => {
  if (args.backend === "embedded" && isChief) {
    print({ event: "start", t: now() });
    const host = await hostCoordinationService({ chief: [chiefAddress] }, { coordination: timeouts, logger: quiet });
    return host.client({ task, tasks, isChief, timeouts });
  }
  // Every task serves (as in a real cluster); workers on any free port.
  const server = new Server(
    { chief: [chiefAddress], worker: Array.from({ length: args.workers }, () => "127.0.0.1:0") },
    { jobName: args.role, taskIndex: args.index, start: false, logger: quiet },
  );
  print({ event: "start", t: now() });
  await server.start();
  if (args.backend === "etcd") {
    return new EtcdCoordinationClient({ hosts: args.etcdHosts ?? [], prefix: args.prefix ?? "bench/", task, tasks, isChief, timeouts });
  }
  return connectCoordinationService(`grpc://${chiefAddress}`, { task, tasks, isChief, timeouts });
};

/** The p50 of `n` timed runs of `op(i)`, in µs. */
const p50Us = async (n: number, op: (i: number) => Promise<unknown>): Promise<number> => {
  const us: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await op(i);
    us.push((performance.now() - t0) * 1000);
  }
  return median(us);
};

const main = async (): Promise<void> => {
  // The etcd client loads etcd3 (and grpc-js) on first use: load it now, with the other modules.
  if (args.backend === "etcd") createRequire(import.meta.url)("etcd3");
  print({ event: "loaded" });
  const lines = createInterface({ input: process.stdin });
  await new Promise<void>((resolve) => lines.once("line", () => resolve()));
  const client = await join();
  await client.connect();
  print({ event: "ready", t: now() });
  const n = args.kvOps ?? 0;
  if (n > 0) {
    const insertUs = await p50Us(n, (i) => client.insert(`kv/${i}`, "v"));
    const getUs = await p50Us(n, (i) => client.get(`kv/${i}`, { timeoutMs: 10_000 }));
    print({ event: "kv", insertUs, getUs, ops: n });
  }
  try {
    await client.get("never", { timeoutMs: 600_000 });
  } catch (e) {
    const error = e as Error;
    print({ event: "error", t: now(), name: error.name, message: error.message });
  }
  setInterval(() => undefined, 60_000); // stay until killed
};

main().catch((e: unknown) => {
  print({ event: "failed", name: (e as Error).name, message: (e as Error).message });
  process.exit(1);
});
