/**
 * The `memory` backend's connection (memoryBackend.ts): one embedded service per in-process
 * cluster name, created by the first task that joins and closed when the last one leaves,
 * reached in-process with inline heartbeats on the task's clock.
 *
 * @module
 */

import type { Clock } from "../../../time/Clock.js";
import type { BackendTask, CoordinationConnection } from "../backend.js";
import { serveTask } from "../backendSupport.js";
import type { CoordinationClient, CoordinationClientOptions } from "../CoordinationClient.js";
import { EmbeddedCoordinationClient, inProcessTransport } from "../EmbeddedCoordinationClient.js";
import { EmbeddedCoordinationService } from "../EmbeddedCoordinationService.js";
import { clusterFingerprint } from "../identity.js";
import { InvalidArgumentError } from "../../../errors.js";

/** A task's place in an in-process cluster. */
export interface MemoryMember {
  readonly client: CoordinationClient;
  /** Gives up the place (after the client closed); the last one closes the cluster's service. */
  leave(): void;
}

/** An in-process cluster: its service, whose tasks on which clock, and how many tasks use it. */
interface MemoryCluster {
  readonly service: EmbeddedCoordinationService;
  readonly tasks: string;
  readonly clock: Clock;
  readonly heartbeatTimeoutMs: number | undefined;
  members: number;
}

/** The services of this process, by in-process cluster name. */
const clusters = new Map<string, MemoryCluster>();

/**
 * Joins (or starts) the in-process cluster `name`. The first member's clock and heartbeat
 * timeout are the service's; a task that names the same cluster with other tasks, another clock
 * or another heartbeat timeout is refused (two clusters would share one service's generations).
 *
 * @throws InvalidArgumentError naming the difference and the fix.
 */
export const joinMemoryCluster = (name: string, clientOptions: CoordinationClientOptions, clock: Clock): MemoryMember => {
  const tasks = JSON.stringify([...clientOptions.tasks].sort());
  const heartbeatTimeoutMs = clientOptions.timeouts?.heartbeatTimeoutMs;
  let entry = clusters.get(name);
  if (entry !== undefined) {
    const differs =
      entry.tasks !== tasks
        ? `its tasks are ${entry.tasks}, not ${tasks}`
        : entry.clock !== clock
          ? "its tasks run on another clock"
          : entry.heartbeatTimeoutMs !== heartbeatTimeoutMs
            ? `its heartbeat timeout is ${timeoutText(entry.heartbeatTimeoutMs)}, not ${timeoutText(heartbeatTimeoutMs)}`
            : undefined;
    if (differs !== undefined) {
      throw new InvalidArgumentError(`memory cluster ${name} is in use in this process, and ${differs}: give each cluster its own cluster.memoryCluster, and every task of one cluster the same settings and clock`);
    }
  }
  if (entry === undefined) {
    entry = { service: new EmbeddedCoordinationService({ clock, backend: "memory", ...(heartbeatTimeoutMs === undefined ? {} : { heartbeatTimeoutMs }) }), tasks, clock, heartbeatTimeoutMs, members: 0 };
    clusters.set(name, entry);
  }
  let client: EmbeddedCoordinationClient;
  try {
    client = new EmbeddedCoordinationClient(inProcessTransport(entry.service), { ...clientOptions, clock, heartbeats: "inline" });
  } catch (e) {
    // Bad options (a timeout, say): a cluster nobody joined is not kept.
    if (entry.members === 0) {
      entry.service.close();
      clusters.delete(name);
    }
    throw e;
  }
  const joined = entry;
  joined.members += 1;
  let left = false;
  return {
    client,
    leave: () => {
      if (left) return;
      left = true;
      joined.members -= 1;
      if (joined.members === 0) {
        joined.service.close();
        if (clusters.get(name) === joined) clusters.delete(name);
      }
    },
  };
};

/** Connects `task` to the in-process cluster `memoryCluster` (default: its cluster's fingerprint). */
export const connectMemory = (task: BackendTask, memoryCluster: string | undefined): Promise<CoordinationConnection> => {
  const name = memoryCluster ?? clusterFingerprint(task.spec);
  let member: MemoryMember | undefined;
  return serveTask(
    task,
    () => (member = joinMemoryCluster(name, task.clientOptions, task.clock)).client,
    `in this process (memory cluster ${name})`,
    () => {
      member?.leave();
      return Promise.resolve();
    },
  );
};

/** A heartbeat timeout as the refusal says it: `4000 ms`, or `the default`. */
const timeoutText = (ms: number | undefined): string => (ms === undefined ? "the default" : `${ms} ms`);
