/**
 * A bare task of a cluster (test/fixtures/coordination/task.ts, scenario `block`): a coordination
 * client that registers, heartbeats and waits, and never joins a replica group. With it in the
 * cluster, the other tasks are certain to be in their group's join when a test acts, whatever
 * the machine's load.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";

import { repoRoot } from "./cliChild.js";

/** Where the bare task registers: the chief's embedded service, or etcd under a prefix. */
export type BareTaskBackend = { readonly chiefTarget: string } | { readonly etcdEndpoints: readonly string[]; readonly etcdPrefix: string };

/** Starts worker `index` as a bare task (kill it after the test). */
export const spawnBareWorker = (index: number, backend: BareTaskBackend): ChildProcess =>
  spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      join(repoRoot, "test/fixtures/coordination/task.ts"),
      JSON.stringify({
        role: "worker",
        index,
        scenario: "block",
        heartbeatTimeoutMs: 10_000,
        ...("chiefTarget" in backend ? { target: backend.chiefTarget } : { etcdHosts: backend.etcdEndpoints, prefix: backend.etcdPrefix }),
      }),
    ],
    { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
  );
