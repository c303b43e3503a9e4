/**
 * The {@link Collective} interface lives in the core (`src/Collective.ts`), so that the
 * TensorFlow.js adapter, a layer below the cluster, can take one; re-exported here for the
 * cluster's own modules.
 *
 * @module
 */

export { CollectiveReformedError, DEFAULT_COLLECTIVE_TIMEOUT_SECS, RankStopVote, type Collective, type CollectiveBuffer, type CollectiveCallOptions, type ReduceOp, type StopVote } from "../../Collective.js";
