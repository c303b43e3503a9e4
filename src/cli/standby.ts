/**
 * A task's standby process under `launch` (its default when it can restart; `--no-standby`
 * turns them off): `run` started ahead of need, with its
 * modules loaded (the command line, `run`, the cluster's gRPC and coordination modules,
 * TensorFlow.js), waiting for `launch` to hand it a group. A restarted group then starts without
 * loading them, the largest part of a restart (docs/performance.md, "Process start to first
 * step").
 *
 * The protocol, on the standby's stdin (a pipe only `launch` writes):
 * - `launch` spawns the standby with the task's command line and environment, and
 *   {@link STANDBY_ENV} set (honoured only beside `launch`'s own `MONITORED_SESSION_LAUNCH_READY`;
 *   `launch` never passes on one it inherited);
 * - the standby loads its modules (a module that fails to load is left for the real start to
 *   report), then reads one line: {@link StandbyGo}, JSON, the variables of the group it joins
 *   (TF_CONFIG, the chaos schedule's faults for the task);
 * - it sets them, drops {@link STANDBY_ENV}, and goes on as a task `launch` had just spawned, its
 *   start counted from that moment (`processStartMs` in its goodput log);
 * - stdin closed without a line (`launch` is done, or died): it exits 0 without a word; a line
 *   that is not a go exits 2 with one line naming the problem.
 *
 * Until the go, the standby has no signal handlers of its own: a signal ends it as Node's
 * default does (it holds nothing).
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import * as t from "io-ts";

import { decode, formatIssue } from "../codec.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Set by `launch` in a standby's environment (`"1"`). */
export const STANDBY_ENV = "MONITORED_SESSION_STANDBY";

/** What `launch` writes to a standby, one JSON line: the group's variables for its task. */
export interface StandbyGo {
  readonly env: Readonly<Record<string, string>>;
}

/** How a standby ended its wait. */
export type StandbyOutcome =
  /** Go: the variables are set; the start is counted from `startMs` (Unix epoch ms). */
  | { readonly go: true; readonly startMs: number }
  /** No go: exit with `code`, after writing `line` (if any) to stderr. */
  | { readonly go: false; readonly code: number; readonly line?: string };

/** The longest go line a standby reads (the variables of one task). */
const MAX_GO_BYTES = 1 << 20;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

const StandbyGoCodec: t.Type<StandbyGo, StandbyGo, unknown> = t.exact(t.type({ env: t.record(t.string, t.string) }), "a standby's go ({\"env\": {name: value}})");

/** The go line `launch` writes to a standby for `env` (newline included). */
export const standbyGoLine = (env: Readonly<Record<string, string>>): string => `${JSON.stringify({ env } satisfies StandbyGo)}\n`;

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Decodes a go line; `Left` is the one-line problem. The variable {@link STANDBY_ENV} itself,
 * `__proto__`, and names that are not variable names, are refused.
 */
const decodeStandbyGo = (line: string): E.Either<string, StandbyGo> => {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch (e) {
    return E.left(`the go line is not JSON (${(e as Error).message})`);
  }
  const r = decode(StandbyGoCodec, json);
  if (E.isLeft(r)) return E.left(`the go line is not ${StandbyGoCodec.name}: ${r.left.map(formatIssue).join("; ")}`);
  // The keys as written (a decoded record would have taken `__proto__` for its prototype).
  const bad = Object.keys((json as { env: object }).env).find((k) => k === STANDBY_ENV || k === "__proto__" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(k));
  return bad === undefined ? r : E.left(`the go line may not set ${JSON.stringify(bad)}`);
};

/**
 * The standby's wait: loads the modules (`preload`, whose failures are ignored) while it reads
 * the go line from `input`, then applies it to `env`. Returns at the go, loaded or not (a module
 * still loading is waited for by the first import that needs it), so that the task's start is
 * stamped (`now`) and its signal handlers installed at once.
 */
export const standBy = async (input: NodeJS.ReadableStream, env: NodeJS.ProcessEnv, preload: () => Promise<unknown>, now: () => number): Promise<StandbyOutcome> => {
  void preload().catch(() => undefined);
  const line = await firstLine(input);
  if (line === undefined) return { go: false, code: 0 };
  const go = line === null ? E.left(`the go line is longer than ${MAX_GO_BYTES} bytes`) : decodeStandbyGo(line);
  if (E.isLeft(go)) return { go: false, code: 2, line: `monitored-session: standby (launch): ${go.left}; this process only takes a go from launch` };
  delete env[STANDBY_ENV];
  Object.assign(env, go.right.env);
  return { go: true, startMs: now() };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The first line of `input` (without its newline); `undefined` at its end before one; `null` past {@link MAX_GO_BYTES} without one. */
const firstLine = (input: NodeJS.ReadableStream): Promise<string | undefined | null> =>
  new Promise((resolve) => {
    let text = "";
    const done = (line: string | undefined | null): void => {
      input.off("data", onData);
      input.off("end", onEnd);
      input.off("error", onEnd);
      input.pause();
      resolve(line);
    };
    const onData = (chunk: Buffer | string): void => {
      text += typeof chunk === "string" ? chunk : chunk.toString("utf8");
      const nl = text.indexOf("\n");
      if (nl >= 0) done(text.slice(0, nl));
      else if (text.length > MAX_GO_BYTES) done(null);
    };
    const onEnd = (): void => done(undefined);
    input.on("data", onData);
    input.once("end", onEnd);
    input.once("error", onEnd);
  });
