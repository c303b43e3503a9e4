/**
 * TensorFlow for the round-trip tests: the Python of the cached virtual environment that
 * scripts/tensorflow-venv.sh makes (.ci/run installs it), and a runner that keeps it quiet and
 * small. Without the environment, `python` is undefined and `why` says why (the tests skip with it).
 */
import { execFile, spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const venv = spawnSync("bash", [join(ROOT, "scripts/tensorflow-venv.sh"), "--find-only"], { encoding: "utf8" });

/** The venv's Python, or `undefined` when there is none. */
export const python: string | undefined = venv.status === 0 ? venv.stdout.trim() : undefined;

/** Why there is no TensorFlow (meaningful when {@link python} is undefined). */
export const why = `no TensorFlow (${venv.stderr.trim().replace(/^tensorflow-venv: /, "") || `exit ${String(venv.status)}`})`;

/**
 * TensorFlow on one thread, at the lowest priority: it runs beside other test files (the pods of
 * a cluster simulation among them), and by default it takes every core with its thread pools.
 */
const QUIET_TENSORFLOW = { TF_CPP_MIN_LOG_LEVEL: "3", TF_NUM_INTRAOP_THREADS: "1", TF_NUM_INTEROP_THREADS: "1", OMP_NUM_THREADS: "1" };

/** Runs `script` (a path from the repository's root) with `args` in the venv; resolves with its stdout. */
export const runTensorflowScript = async (script: string, ...args: string[]): Promise<string> => {
  const { stdout } = await promisify(execFile)("nice", ["-n", "19", python as string, join(ROOT, script), ...args], {
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, ...QUIET_TENSORFLOW },
  });
  return stdout;
};
