/**
 * The collective-join step of a task's start (clusterRuntime.ts `startClusterTask`), and how a
 * replica group hears of the cluster's failure: {@link joinCollective} builds the data-parallel
 * group's ring through the coordination service's keys of the current generation;
 * {@link failGroup} fails (or, for a preemption, stops) the group's collectives at once.
 *
 * @module
 */

import type { CoordinationClient } from "../cluster/coordination/CoordinationClient.js";
import { TcpCollective } from "../cluster/collective/TcpCollective.js";
import { parseAddress } from "../cluster/TfConfig.js";
import { clusterFailureOf, OpError, UnavailableError } from "../errors.js";
import type { Logger } from "../Logger.js";
import { DEFAULT_COLLECTIVE_TIMEOUT_SECS } from "../session/Collective.js";
import type { Clock } from "../time/Clock.js";
import type { ClusterTask } from "./clusterTask.js";
import type { ReplicaGroup } from "./replicaGroup.js";

/** Where each rank publishes its data-plane address and incarnation, per generation. */
const COLLECTIVE_KEY = "monitored-session/run/collective";

/** What {@link joinCollective} needs besides the client and the group. */
export interface JoinOptions {
  /** This task's TF_CONFIG address: the data plane binds its host (any free port). */
  readonly address: string;
  readonly token: string | undefined;
  readonly tls: ClusterTask["options"]["tls"];
  readonly timeoutSecs: number | undefined;
  readonly clock: Clock;
  readonly logger: Logger;
}

/**
 * Builds the group's `TcpCollective`: binds a port on this task's host, publishes its address and
 * incarnation under the current generation, reads every other rank's (a blocking get with the
 * collective's deadline), and connects the ring. A peer of another generation or incarnation is
 * refused by the collective's handshake.
 */
export const joinCollective = async (client: CoordinationClient, group: ReplicaGroup, o: JoinOptions): Promise<TcpCollective> => {
  const generation = client.generation ?? 0;
  const host = (parseAddress(o.address) as { host: string }).host;
  const timeoutSecs = o.timeoutSecs ?? DEFAULT_COLLECTIVE_TIMEOUT_SECS;
  // By rank: task names contain slashes, which keys use as separators.
  const keyOf = (task: string): string => `${COLLECTIVE_KEY}/${generation}/rank${group.tasks.indexOf(task)}`;
  const mine = group.tasks[group.rank] as string;
  const others = group.tasks.filter((t) => t !== mine);
  const gather = (what: string): Promise<string[]> =>
    Promise.all(group.tasks.map((t) => (t === mine ? Promise.resolve("") : client.get(`${keyOf(t)}/${what}`, { timeoutMs: timeoutSecs * 1000 }))));
  // First the incarnations (known at registration), so that the collective refuses any other.
  await client.insert(`${keyOf(mine)}/incarnation`, client.incarnation);
  const incarnations = await gather("incarnation");
  const collective = new TcpCollective({
    rank: group.rank,
    addresses: group.tasks.map(() => `${host.includes(":") ? `[${host}]` : host}:0`),
    tasks: group.tasks,
    generation,
    incarnation: client.incarnation,
    peerIncarnations: incarnations.map((inc, r) => (r === group.rank ? undefined : inc)),
    token: o.token,
    tls: o.tls,
    collectiveTimeoutSecs: timeoutSecs,
    connectTimeoutSecs: timeoutSecs,
    clock: o.clock,
    logger: o.logger,
  });
  try {
    const bound = await collective.listen();
    await client.insert(`${keyOf(mine)}/address`, bound);
    const addresses = await gather("address");
    addresses[group.rank] = bound;
    await collective.connect(addresses);
  } catch (e) {
    await collective.close().catch(() => undefined);
    throw e;
  }
  // As the server's line says it: what protects the data plane (the collective's own links).
  const secured = `${o.tls === undefined ? "" : "; TLS"}${o.token === undefined ? "" : "; token required"}`;
  o.logger.info(`Joined the replica group: rank ${group.rank} of ${group.size} (${others.length === 0 ? "alone" : `with ${others.join(", ")}`}${secured}; collective deadline ${timeoutSecs} s, cluster.collectiveTimeoutSecs).`);
  return collective;
};

/**
 * Tells the group of the cluster's failure `e`: a preemption report is this rank's stop vote once
 * the group trains (every rank stops after the same step), and cancels its collectives before
 * (CancelledError: the ranks exit with the preemption code); anything else fails them with
 * UnavailableError naming the failed task (the first rank the message names, else the message itself).
 */
export const failGroup = (group: ReplicaGroup, e: Error): void => {
  if (clusterFailureOf(e)?.kind === "preemption") {
    // Every rank trains: the next step's vote stops them all at one boundary (the chief saves).
    // Before that, the reporter may leave without ever stepping: cancel instead.
    if (group.joined) group.requestStop();
    else void group.close();
    return;
  }
  const mine = group.tasks[group.rank];
  const f = clusterFailureOf(e);
  const named = (f?.kind === "declaredFailed" ? f.tasks : f?.kind === "peerLost" ? [f.task] : f?.kind === "reported" ? [f.reporter] : []).filter((t) => t !== mine && group.tasks.includes(t));
  // A reported error keeps its class and code on every rank (a ResourceExhaustedError stays one); anything else is the cluster's unavailability.
  const error = e instanceof UnavailableError || (e instanceof OpError && f?.kind === "reported") ? e : new UnavailableError(`the cluster failed: ${e.message}`, { cause: e });
  const others = group.tasks.filter((t) => t !== mine);
  for (const t of named.length > 0 ? named : others.slice(0, 1)) group.onPeerFailed(t, error);
};
