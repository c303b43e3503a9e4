/**
 * The cluster benchmark's MLP (bench/mlp.ts) as a job for `monitored-session run` and `launch`:
 * what `scalingByLaunch` in bench/cluster.bench.ts trains with `launch --workers 1` and
 * `launch --workers 2`. Each replica reads its shard; `BENCH_MLP_BATCH` is the per-worker batch
 * (default 128), also given as `batchSize` so that the chief's step counter logs global
 * examples per second.
 */

import { defineJob, type JobContext } from "../src/config/index.js";
import { InMemoryDataSource, tfjsSession } from "../src/tfjs/index.js";
import { buildMlp, mlpDataset, mlpLoss, mlpOptimizer } from "./mlp.js";

const batchSize = Number(process.env["BENCH_MLP_BATCH"] ?? "128");

export default ({ replica }: JobContext) =>
  defineJob({
    sessionFactory: () =>
      tfjsSession({
        model: buildMlp(),
        optimizer: mlpOptimizer(),
        data: new InMemoryDataSource({ ...mlpDataset(batchSize), batchSize, seed: 5, ...(replica === undefined ? {} : { shard: replica.shard }) }),
        lossFn: mlpLoss,
        ...(replica === undefined ? {} : { collective: replica.collective }),
      }),
    fetches: "train",
    batchSize,
  });
