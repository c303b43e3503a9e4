/**
 * The defaults of `monitored-session manifest kubernetes` that its command line shows in its
 * help: apart from the manifest's builder, so that the command line declares them without
 * loading it.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Where the CLI is in an image that installed the package (`--cli` otherwise). */
const DEFAULT_CLI = "node_modules/monitored-session/dist/src/cli/main.js";

/** The default port of a task's server (TensorFlow's TFJob uses the same). */
const DEFAULT_PORT = 2222;

/**
 * Each pod's requests unless `cpu`, `memory` or `bestEffort` say otherwise. One CPU: a task's
 * step runs on Node's one JavaScript thread (TensorFlow.js's cpu and wasm backends compute
 * there), so a step uses about one core; with no CPU limit the pod still borrows idle cores for
 * the garbage collector and I/O. 2Gi: Node itself (about 100 MB), TensorFlow.js with the model,
 * its gradients and optimizer slots, the data held in memory, and the copy of every variable a
 * checkpoint save makes; the bundled job needs far less, and a bigger model asks for more.
 */
export const DEFAULT_RESOURCES = { cpu: "1", memory: "2Gi" } as const;

/** The defaults of the command's flags (`--port`, `--workdir`, `--cli`). */
export const MANIFEST_DEFAULTS = { port: DEFAULT_PORT, workdir: "/app", cli: DEFAULT_CLI } as const;
