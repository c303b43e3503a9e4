/**
 * The file names of a tensor bundle at a prefix, as TensorFlow names them (TF
 * core/util/tensor_bundle/naming.cc): `<prefix>.index` and `<prefix>.data-%05d-of-%05d`.
 *
 * @module
 */

/** The index file of the bundle at `prefix`. */
export const bundleIndexPath = (prefix: string): string => `${prefix}.index`;

/** The data file of shard `shardId` of `numShards` of the bundle at `prefix`. */
export const bundleDataPath = (prefix: string, shardId = 0, numShards = 1): string =>
  `${prefix}.data-${String(shardId).padStart(5, "0")}-of-${String(numShards).padStart(5, "0")}`;
