/**
 * The cluster's control plane: how fast 4 processes (a chief and 3 workers) form a cluster, how
 * fast a killed worker is noticed, and what a key-value operation costs, on each coordination
 * backend. Each launch is 4 fresh processes (bench/clusterTask.ts):
 *
 * - `startupMs`: from the last of the 4 `Server.start()` calls (each child loads its modules,
 *   then waits for a `go` line, so loading is not counted) to the last task's `connect()`
 *   having resolved, i.e. every task registered. For etcd, the etcd started beforehand is not
 *   counted.
 * - `failureDetectMs`: from SIGKILL of worker 2 to the last of the 3 other tasks having raised
 *   UnavailableError naming it (each child timestamps its own error).
 * - `kvOpUs`: p50 of `insert` and of a `get` of an existing key, timed by worker 0 (its own
 *   process, over gRPC or etcd), on the first launch.
 *
 * Children timestamp with the same host clock. Medians over `launches` launches per backend.
 *
 * - `resumeToFirstStepMs` (bench/resumeToFirstStep.ts): a 2-task cluster of the bundled job
 *   (`launch --workers 2`), launched fresh, then `BENCH_RESUME_LAUNCHES` times again (default 5)
 *   resuming from its checkpoint, `BENCH_RESUME_STEPS` steps each (default 300): from the chief's
 *   `model published to the workers` line to the worker's `Starting at global step` line, as the
 *   lines arrive here; median over the resumes, and the fresh launch's figure.
 *   `BENCH_RESUME_ONLY=1` measures only this one.
 */

import os from "node:os";
import { taskName } from "../src/cluster/coordination/identity.js";
import { EtcdProcess, etcdBinary, freePort } from "../test/cluster/coordination/etcdHarness.js";
import { type JsonChild, killAll, spawnJsonChild } from "./jsonChild.js";
import { measureResumeToFirstStep } from "./resumeToFirstStep.js";
import { median, round } from "./stats.js";

// The tests' value: on a loaded 2-core machine, 2 s (etcd's minimum) got live workers declared failed
// while their heartbeat threads were still starting. The default is 10 s.
const heartbeatTimeoutMs = 4_000;
const workers = 3;
const launches = 5;
const kvOps = 300;
const loadBoundMs = 180_000; // 4 tsx processes loading on a shared 2-core machine
const stepBoundMs = 60_000;
const killed = taskName("worker", workers - 1);
const resumeSizes = { resumes: Number(process.env["BENCH_RESUME_LAUNCHES"] ?? 5), steps: Number(process.env["BENCH_RESUME_STEPS"] ?? 300) };

const now = (): number => performance.timeOrigin + performance.now();

const spawnTask = (args: Record<string, unknown>): JsonChild => spawnJsonChild("bench/clusterTask.ts", args);

interface Launch {
  readonly startupMs: number;
  readonly failureDetectMs: number;
  readonly kv?: { readonly insertUs: number; readonly getUs: number; readonly ops: number };
}

/** One launch of 4 processes: startup, (kv on the first), then SIGKILL of the last worker. */
const launch = async (backend: "embedded" | "etcd", n: number, etcd: EtcdProcess | undefined): Promise<Launch> => {
  const common = {
    backend,
    workers,
    heartbeatTimeoutMs,
    ...(backend === "embedded" ? { chiefPort: await freePort() } : { etcdHosts: [etcd?.endpoint], prefix: `bench-${n}/` }),
  };
  const children = [
    spawnTask({ ...common, role: "chief", index: 0 }),
    ...Array.from({ length: workers }, (_, index) =>
      spawnTask({ ...common, role: "worker", index, ...(index === 0 && n === 0 ? { kvOps } : {}) }),
    ),
  ];
  try {
    await Promise.all(children.map((c) => c.next("loaded", loadBoundMs)));
    for (const c of children) c.process.stdin?.write("go\n");
    const starts = await Promise.all(children.map((c) => c.next("start", stepBoundMs)));
    const readies = await Promise.all(children.map((c) => c.next("ready", stepBoundMs)));
    const startupMs = Math.max(...readies.map((e) => e.t ?? Number.NaN)) - Math.max(...starts.map((e) => e.t ?? Number.NaN));
    const kv = n === 0 ? ((await children[1]?.next("kv", stepBoundMs)) as unknown as Launch["kv"]) : undefined;
    const victim = children[workers] as JsonChild;
    const others = children.slice(0, workers);
    const killedAt = now();
    victim.process.kill("SIGKILL");
    const errors = await Promise.all(others.map((c) => c.next("error", 3 * (heartbeatTimeoutMs + 1_000) + stepBoundMs)));
    for (const e of errors) {
      if (e.name !== "UnavailableError" || !String(e.message).includes(killed)) {
        throw new Error(`${e.task} raised ${String(e.name)} (${String(e.message)}), not UnavailableError naming ${killed}`);
      }
    }
    const failureDetectMs = Math.max(...errors.map((e) => e.t ?? Number.NaN)) - killedAt;
    return { startupMs, failureDetectMs, ...(kv === undefined ? {} : { kv }) };
  } finally {
    await killAll(children);
  }
};

const summarize = (xs: readonly number[]) => ({ median: round(median(xs), 1), samples: xs.map((x) => round(x, 1)) });

const measure = async (backend: "embedded" | "etcd") => {
  const etcd = backend === "etcd" ? await EtcdProcess.start() : undefined;
  try {
    const runs: Launch[] = [];
    for (let n = 0; n < launches; n++) {
      runs.push(await launch(backend, n, etcd));
      console.log(`${backend} launch ${n + 1}/${launches}: ${JSON.stringify(runs.at(-1))}`);
    }
    const kv = runs[0]?.kv;
    const startupMs = runs.map((r) => r.startupMs);
    const failureDetectMs = runs.map((r) => r.failureDetectMs);
    return {
      backend,
      heartbeatTimeoutMs,
      startupSamples: startupMs.length,
      failureSamples: failureDetectMs.length,
      startupMs: summarize(startupMs),
      failureDetectMs: summarize(failureDetectMs),
      kvOpUs: { insert: round(kv?.insertUs ?? Number.NaN, 1), get: round(kv?.getUs ?? Number.NaN, 1), ops: kv?.ops ?? 0 },
      goals: { startupMs: 1_000, failureDetectMs: heartbeatTimeoutMs + 1_000 },
      goalsMet: { startupMs: median(startupMs) <= 1_000, failureDetectMs: median(failureDetectMs) <= heartbeatTimeoutMs + 1_000 },
    };
  } finally {
    await etcd?.stop();
  }
};

/** `resumeToFirstStepMs`, with its details. */
const resume = async (): Promise<Record<string, unknown>> => {
  const r = await measureResumeToFirstStep(resumeSizes);
  return { resumeToFirstStepMs: r.resumeToFirstStepMs.median, resume: r };
};

export default async (): Promise<Record<string, unknown>> => {
  const loadBefore = os.loadavg().map((x) => round(x, 2));
  if (process.env["BENCH_RESUME_ONLY"] === "1") {
    const r = await resume();
    return { loadAverage: { before: loadBefore, after: os.loadavg().map((x) => round(x, 2)) }, ...r };
  }
  const backends = [await measure("embedded")];
  if (etcdBinary === undefined) console.warn("SKIP etcd backend: no `etcd` binary (apt-get install -y etcd-server)");
  else backends.push(await measure("etcd"));
  const r = await resume();
  return {
    processes: 1 + workers,
    heartbeatTimeoutMs,
    launches,
    loadAverage: { before: loadBefore, after: os.loadavg().map((x) => round(x, 2)) },
    backends,
    ...r,
  };
};
