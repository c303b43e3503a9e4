/**
 * Collectives for synchronous data parallelism: the {@link Collective} interface and its TCP
 * ring implementation. Re-exported by `monitored-session/cluster`.
 *
 * @module
 */

export { CollectiveReformedError, DEFAULT_COLLECTIVE_TIMEOUT_SECS, RankStopVote, type Collective, type CollectiveBuffer, type CollectiveCallOptions, type ReduceOp, type StopVote } from "../../session/Collective.js";
export { TcpCollective, type CollectiveStats, type TcpCollectiveOptions } from "./TcpCollective.js";
