/**
 * Selecting the TensorFlow.js backend that runs the kernels: `cpu` (pure JavaScript, part of
 * `@tensorflow/tfjs`) or `wasm` (WebAssembly with SIMD, from the optional peer package
 * `@tensorflow/tfjs-backend-wasm`, whose `.wasm` binaries ship inside the npm package).
 * Call {@link useBackend} before building the model: tensors made earlier stay valid, but each
 * later kernel runs on the selected backend.
 *
 * @example
 * ```ts
 * import * as tf from "@tensorflow/tfjs";
 * import { useBackend } from "monitored-session/tfjs";
 *
 * await useBackend("wasm"); // one thread, pinned before the backend initializes
 * const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [2], units: 3 })] });
 * ```
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

import { BackendNotInstalledError, RuntimeError, ValueError } from "../errors.js";
import { isModuleNotFound } from "../util/moduleNotFound.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A TensorFlow.js backend this package can select (and a configuration file can name). */
export type TfjsBackendName = "cpu" | "wasm";

/** The npm package of the `wasm` backend. */
export const WASM_BACKEND_PACKAGE = "@tensorflow/tfjs-backend-wasm";

/**
 * The number of threads the `wasm` backend's XNNPACK thread pool is pinned to. One, because:
 * a kernel's floating-point sums then always run in the same order, so a step is reproducible
 * whatever the machine; CI has 2 cores, and a second thread would compete with the event loop,
 * the checkpoint writes and the other test processes; and in Node the package (4.22) loads its
 * single-threaded SIMD binary anyway (its multi-threaded build is browser-only), so pinning makes
 * that explicit rather than leaving it to a default that follows the core count.
 */
export const WASM_THREADS_COUNT = 1;

/** What {@link useBackend} needs of `@tensorflow/tfjs-backend-wasm` (its module namespace). */
export interface WasmBackendModule {
  setThreadsCount(numThreads: number): void;
  getThreadsCount(): number;
  readonly version_wasm: string;
}

/** Options of {@link useBackend}. */
export interface UseBackendOptions {
  /**
   * Imports `@tensorflow/tfjs-backend-wasm` (default: a dynamic `import`). Tests inject a failing
   * import to see what a user without the package sees.
   */
  readonly importWasm?: () => Promise<WasmBackendModule>;
}

/** The backend in use after {@link useBackend}. */
export interface TfjsBackendInfo {
  readonly name: TfjsBackendName;
  /** Threads running kernels: the wasm backend's thread pool size; 1 for `cpu`. */
  readonly threadsCount: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Makes `name` TensorFlow.js's current backend and waits until it is ready. For `wasm`, imports
 * `@tensorflow/tfjs-backend-wasm` and pins its thread count to {@link WASM_THREADS_COUNT} before
 * the backend initializes. Throws {@link BackendNotInstalledError} (one line, with the install
 * command) when the package is missing or its version differs from `@tensorflow/tfjs-core`'s.
 *
 * The `wasm` backend's initialization runs Emscripten's Node glue, which adds a process
 * `uncaughtException` listener and an `unhandledRejection` listener that rethrow: Node would
 * then exit 7 on any uncaught error of the program and print the glue's minified source.
 * `useBackend` removes the listeners of those two events that appeared while it ran, so Node's
 * default holds (exit 1 and the error's stack); listeners added before the call stay.
 */
export const useBackend = async (name: TfjsBackendName, options: UseBackendOptions = {}): Promise<TfjsBackendInfo> => {
  if (name === "wasm") {
    return withoutAddedListeners(GLUE_EVENTS, async () => {
      const wasm = await importWasmBackend(options.importWasm ?? defaultImportWasm);
      wasm.setThreadsCount(WASM_THREADS_COUNT);
      await selectBackend(name);
      return { name, threadsCount: wasm.getThreadsCount() };
    });
  }
  if (name !== "cpu") throw new ValueError(`Unknown TensorFlow.js backend "${String(name)}": use "cpu" or "wasm".`);
  await selectBackend(name);
  return { name, threadsCount: 1 };
};

/** The name of TensorFlow.js's current backend (`tf.getBackend()`). */
export const currentBackend = (): string => tf.getBackend();

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const defaultImportWasm = (): Promise<WasmBackendModule> => import("@tensorflow/tfjs-backend-wasm");

/**
 * The process events whose listeners Emscripten's Node glue adds when the `wasm` backend
 * initializes (in `tf.setBackend("wasm")`, not at the import; tfjs-backend-wasm 4.22). It adds no
 * other listener: an exit code is set only by the glue's `quit_`, which the backend never calls.
 */
const GLUE_EVENTS = ["uncaughtException", "unhandledRejection"] as const;

/** Runs `f`, then removes the listeners of `events` that were added meanwhile (also when `f` throws). */
const withoutAddedListeners = async <A>(events: readonly string[], f: () => Promise<A>): Promise<A> => {
  // As a plain emitter: Process types each event's listeners apart.
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(events.map((e) => [e, new Set(emitter.listeners(e))]));
  try {
    return await f();
  } finally {
    for (const [e, kept] of before) {
      for (const l of emitter.listeners(e)) if (!kept.has(l)) emitter.removeListener(e, l as (...args: unknown[]) => void);
    }
  }
};

/** `tf.setBackend(name)`, then `tf.ready()`. */
const selectBackend = async (name: TfjsBackendName): Promise<void> => {
  // setBackend logs and returns false when the backend fails to initialize.
  if (!(await tf.setBackend(name))) {
    throw new RuntimeError(`The TensorFlow.js backend "${name}" failed to initialize (see the warning above).`);
  }
  await tf.ready();
};

const installCommand = (): string => `npm install ${WASM_BACKEND_PACKAGE}@${tf.version_core}`;

const importWasmBackend = async (importWasm: () => Promise<WasmBackendModule>): Promise<WasmBackendModule> => {
  let wasm: WasmBackendModule;
  try {
    wasm = await importWasm();
  } catch (e) {
    if (!isModuleNotFound(e, WASM_BACKEND_PACKAGE)) throw e;
    const cmd = installCommand();
    throw new BackendNotInstalledError(`The TensorFlow.js backend "wasm" needs ${WASM_BACKEND_PACKAGE}, which is not installed: run \`${cmd}\`.`, cmd, { cause: e });
  }
  // The wasm package registers its kernels with the tfjs-core it resolves; another version
  // means another copy of tfjs-core, where `tf.setBackend("wasm")` would not find the backend.
  if (wasm.version_wasm !== tf.version_core) {
    const cmd = installCommand();
    throw new BackendNotInstalledError(
      `${WASM_BACKEND_PACKAGE} is version ${wasm.version_wasm} but @tensorflow/tfjs-core is ${tf.version_core}; they must match: run \`${cmd}\`.`,
      cmd,
    );
  }
  return wasm;
};
