/**
 * The TensorFlow.js adapter: a `Session` over a `@tensorflow/tfjs` `LayersModel` whose weights,
 * optimizer state, global step and data position checkpoint through the library's savers.
 * Imported as `monitored-session/tfjs`, so that the core does not load TensorFlow.js.
 *
 * @module
 */

/* Session */
export {
  FEED_NAMES,
  LOSS_OP,
  TRAIN_OP,
  TfjsSession,
  tfjsSession,
  type TfjsLossFn,
  type TfjsMetricFn,
  type TfjsSessionOptions,
  type TfjsSummaryContext,
  type TfjsSummaryFn,
} from "./TfjsSession.js";

/* Export */
export { exportModelArtifacts, type ExportedModel } from "./exportModel.js";

/* Backends */
export {
  currentBackend,
  useBackend,
  WASM_BACKEND_PACKAGE,
  WASM_THREADS_COUNT,
  type TfjsBackendInfo,
  type TfjsBackendName,
  type UseBackendOptions,
  type WasmBackendModule,
} from "./backend.js";

/* Data */
export type { BatchData, TfjsBatch, TfjsDataSource } from "./DataSource.js";
export {
  IN_MEMORY_STATE_NAMES,
  InMemoryDataSource,
  type ExampleArray,
  type InMemoryDataSourceOptions,
  type InMemoryShard,
} from "./InMemoryDataSource.js";
