/**
 * `FakeSession`: a scriptable {@link Session} for unit tests. Declare ops as functions and
 * variables as values; inject an error at a given run call or global step; inspect every call.
 *
 * @example
 * ```ts
 * import { AbortedError } from "monitored-session";
 * import { FakeSession } from "monitored-session/testing";
 *
 * const sess = new FakeSession({ ops: { loss: () => 0.5 } }); // has a global_step and a "train" op
 * sess.injectError(new AbortedError("preempted"), { atCall: 3 });
 * ```
 *
 * @module
 */

import { FailedPreconditionError, InvalidArgumentError, RuntimeError } from "../errors.js";
import { collectNames, mapFetchesAny } from "../session/fetches.js";
import { isPromiseLike } from "../util/promise.js";
import {
  GLOBAL_STEP_NAME,
  type Feeds,
  type FetchResult,
  type Fetches,
  type RunMetadata,
  type RunOptions,
  type Session,
  type VariableCollection,
  type LocalVariableStore,
} from "../session/Session.js";
import { copyTensor, fromTensorValue, toTensorValue, type TensorValue, type VariableValue } from "../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What a fake op sees. */
export interface FakeOpContext {
  readonly feeds: Feeds;
  /** The 1-based number of this `run` call on the session. */
  readonly call: number;
  readonly session: FakeSession;
  get(name: string): VariableValue;
  set(name: string, value: VariableValue): void;
}

/** A fake op: returns the fetched value (may be async). */
export type FakeOp = (ctx: FakeOpContext) => unknown;

/** One recorded `run` call. */
export interface FakeRunCall {
  readonly fetches: Fetches;
  readonly feeds: Feeds | undefined;
  readonly options: RunOptions | undefined;
}

/** Options of {@link FakeSession}. */
export interface FakeSessionOptions {
  /** Named ops. */
  readonly ops?: Readonly<Record<string, FakeOp>>;
  /** Named global variables and their initial values. */
  readonly variables?: Readonly<Record<string, VariableValue>>;
  /** Named local variables and their initial values. */
  readonly localVariables?: Readonly<Record<string, VariableValue>>;
  /**
   * The global step variable's name, or `false` for none (default `global_step`). With a global
   * step and no `train` op given, a `train` op that increments the global step is added.
   */
  readonly globalStep?: string | false;
  /** Whether variables start initialized (default `true`). */
  readonly initialized?: boolean;
  /**
   * Whether the session has `runMaybeSync`, the optional synchronous fast path (default
   * `false`): a run whose ops all answer with plain values then completes within the call, as a
   * TensorFlow.js or Graph step does, so a monitored session over it takes its synchronous path.
   * An op that answers with a promise makes the rest of the run wait for it. `run` behaves the
   * same either way.
   */
  readonly sync?: boolean;
}

/** When an injected error fires. */
export interface InjectAt {
  /** Throw on this 1-based `run` call. */
  readonly atCall?: number;
  /** Throw on a run that starts with the global step equal to this. */
  readonly atStep?: number;
  /** Throw when a run fetches this name (combined with the above if given). */
  readonly onFetch?: string;
  /** How many times to throw (default 1). */
  readonly times?: number;
}

interface Injection extends InjectAt {
  readonly error: unknown;
  remaining: number;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A scriptable fake session. */
export class FakeSession implements Session {
  /** Every `run` call, in order. */
  readonly calls: FakeRunCall[] = [];
  /** How many times `close` was called. */
  closeCount = 0;
  readonly variables: LocalVariableStore;
  readonly globalStepName: string | undefined;
  private readonly ops: Map<string, FakeOp>;
  private readonly initial: Map<string, { value: VariableValue; collection: "global" | "local" }>;
  private readonly values = new Map<string, VariableValue>();
  private readonly injections: Injection[] = [];
  /**
   * With `sync: true`: the same run as {@link run}, answered synchronously where every op did
   * (see {@link Session.runMaybeSync}); absent otherwise.
   */
  readonly runMaybeSync?: <const F extends Fetches>(fetches: F, feeds?: Feeds, options?: RunOptions, runMetadata?: RunMetadata) => FetchResult<F> | Promise<FetchResult<F>>;

  constructor(options: FakeSessionOptions = {}) {
    this.globalStepName = options.globalStep === false ? undefined : (options.globalStep ?? GLOBAL_STEP_NAME);
    this.ops = new Map(Object.entries(options.ops ?? {}));
    this.initial = new Map();
    if (this.globalStepName !== undefined) this.initial.set(this.globalStepName, { value: 0, collection: "global" });
    for (const [k, v] of Object.entries(options.variables ?? {})) this.initial.set(k, { value: v, collection: "global" });
    for (const [k, v] of Object.entries(options.localVariables ?? {})) this.initial.set(k, { value: v, collection: "local" });
    const gs = this.globalStepName;
    if (gs !== undefined && !this.ops.has("train")) {
      this.ops.set("train", (ctx) => {
        const next = (ctx.get(gs) as number) + 1;
        ctx.set(gs, next);
        return next;
      });
    }
    this.variables = this.makeStore();
    if (options.initialized !== false) void this.variables.initialize();
    if (options.sync === true) {
      this.runMaybeSync = <const F extends Fetches>(fetches: F, feeds?: Feeds, runOptions?: RunOptions): FetchResult<F> | Promise<FetchResult<F>> =>
        this.evaluateMaybeSync(fetches, feeds, runOptions) as FetchResult<F> | Promise<FetchResult<F>>;
    }
  }

  /** `true` once `close` was called. */
  get closed(): boolean {
    return this.closeCount > 0;
  }

  /** The current global step (`NaN` if uninitialized or absent). */
  get globalStep(): number {
    const v = this.globalStepName === undefined ? undefined : this.values.get(this.globalStepName);
    return typeof v === "number" ? v : Number.NaN;
  }

  /** Reads a variable directly. */
  get(name: string): VariableValue | undefined {
    return this.values.get(name);
  }

  /** Sets a variable directly (marks it initialized). */
  set(name: string, value: VariableValue): void {
    if (!this.initial.has(name)) throw new InvalidArgumentError(`No variable named "${name}".`);
    this.values.set(name, value);
  }

  /** Adds or replaces an op. */
  setOp(name: string, op: FakeOp): this {
    this.ops.set(name, op);
    return this;
  }

  /** Makes a future `run` throw `error` (e.g. `AbortedError`, `OutOfRangeError`). */
  injectError(error: unknown, at: InjectAt = {}): this {
    this.injections.push({ ...at, error, remaining: at.times ?? 1 });
    return this;
  }

  run<const F extends Fetches>(fetches: F, feeds?: Feeds, options?: RunOptions, _runMetadata?: RunMetadata): Promise<FetchResult<F>> {
    return this.evaluate(fetches, feeds, options) as Promise<FetchResult<F>>;
  }

  close(): void {
    this.closeCount++;
  }

  /** The variables and ops (including ops added by {@link setOp}): every fetchable name but feeds. */
  names(): readonly string[] {
    return [...this.initial.keys(), ...this.ops.keys()];
  }

  private async evaluate(fetches: Fetches, feeds: Feeds | undefined, options: RunOptions | undefined): Promise<unknown> {
    const { results, pending, ctx } = this.begin(fetches, feeds, options);
    for (const n of pending) results.set(n, await (this.ops.get(n) as FakeOp)(ctx));
    return mapFetchesAny(fetches, (n) => results.get(n));
  }

  /** {@link evaluate} without an `await` where an op answered with a plain value. */
  private evaluateMaybeSync(fetches: Fetches, feeds: Feeds | undefined, options: RunOptions | undefined): unknown {
    const { results, pending, ctx } = this.begin(fetches, feeds, options);
    const from = (i: number): unknown => {
      for (; i < pending.length; i++) {
        const n = pending[i] as string;
        const value = (this.ops.get(n) as FakeOp)(ctx);
        if (isPromiseLike(value)) {
          const next = i + 1;
          return Promise.resolve(value).then((v) => {
            results.set(n, v);
            return from(next);
          });
        }
        results.set(n, value);
      }
      return mapFetchesAny(fetches, (n) => results.get(n));
    };
    return from(0);
  }

  /** A run's checks, its record, the values of fetched variables and feeds, and the ops still to run. */
  private begin(fetches: Fetches, feeds: Feeds | undefined, options: RunOptions | undefined): { results: Map<string, unknown>; pending: string[]; ctx: FakeOpContext } {
    if (this.closed) throw new RuntimeError("Attempted to use a closed Session.");
    this.calls.push({ fetches, feeds, options });
    const call = this.calls.length;
    const names = collectNames(fetches, []);
    this.maybeThrow(call, names);
    const f = feeds ?? {};
    const results = new Map<string, unknown>();
    for (const n of names) {
      if (n in f) results.set(n, f[n]);
      else if (this.initial.has(n)) results.set(n, this.read(n));
      else if (!this.ops.has(n)) throw new InvalidArgumentError(`Fetch "${n}" is not a variable, op or feed of the session.`);
    }
    const ctx: FakeOpContext = {
      feeds: f,
      call,
      session: this,
      get: (name) => this.read(name),
      set: (name, value) => this.set(name, value),
    };
    // Each op once, in fetch order.
    const pending = [...new Set(names)].filter((n) => !results.has(n));
    return { results, pending, ctx };
  }

  private maybeThrow(call: number, names: readonly string[]): void {
    for (const inj of this.injections) {
      if (inj.remaining <= 0) continue;
      if (inj.atCall !== undefined && inj.atCall !== call) continue;
      if (inj.atStep !== undefined && inj.atStep !== this.globalStep) continue;
      if (inj.onFetch !== undefined && !names.includes(inj.onFetch)) continue;
      inj.remaining--;
      throw inj.error;
    }
  }

  private read(name: string): VariableValue {
    const v = this.values.get(name);
    if (v !== undefined) return v;
    if (!this.initial.has(name)) throw new InvalidArgumentError(`No variable named "${name}".`);
    throw new FailedPreconditionError(`Attempting to use uninitialized value ${name}`);
  }

  private makeStore(): LocalVariableStore {
    const select = (c: VariableCollection = "all") =>
      [...this.initial].filter(([, v]) => c === "all" || v.collection === c).map(([k]) => k);
    return {
      names: (c) => select(c),
      reportUninitialized: (c) => select(c).filter((n) => !this.values.has(n)),
      initialize: (c) => {
        for (const n of select(c)) {
          const v = (this.initial.get(n) as { value: VariableValue }).value;
          this.values.set(n, n === this.globalStepName ? v : clone(v));
        }
      },
      snapshot: (c = "global") => {
        const out = new Map<string, TensorValue>();
        for (const n of select(c)) {
          out.set(n, copyTensor(toTensorValue(this.read(n), n === this.globalStepName ? "int64" : undefined)));
        }
        return out;
      },
      restore: (incoming) => {
        for (const [n, t] of incoming) {
          const init = this.initial.get(n);
          if (init === undefined) throw new InvalidArgumentError(`Checkpoint has variable "${n}" that the session does not.`);
          const like = n === this.globalStepName ? 0 : (this.values.get(n) ?? init.value);
          this.values.set(n, n === this.globalStepName ? Number(t.data[0]) : fromTensorValue(t, like));
        }
      },
    };
  }
}

/** A {@link SessionCreator}-compatible creator that records what it made and can fail on cue. */
export class FakeSessionCreator {
  /** Sessions created so far, in order. */
  readonly created: FakeSession[] = [];
  private readonly script: (FakeSession | Error)[];

  /**
   * @param make Makes each new session (default: `new FakeSession()`).
   * @param script Results for the first calls, in order: a session to return or an error to
   * throw. Once used up, `make` is called.
   */
  constructor(
    private readonly make: () => FakeSession = () => new FakeSession(),
    script: readonly (FakeSession | Error)[] = [],
  ) {
    this.script = [...script];
  }

  async createSession(): Promise<FakeSession> {
    const next = this.script.length > 0 ? this.script.shift() : this.make();
    if (next instanceof Error) throw next;
    const s = next as FakeSession;
    this.created.push(s);
    return s;
  }

  /** The most recently created session. */
  get last(): FakeSession | undefined {
    return this.created[this.created.length - 1];
  }
}

const clone = (v: VariableValue): VariableValue =>
  typeof v === "object" ? (Array.isArray(v) ? [...(v as string[])] : "slice" in v ? (v as Float64Array).slice() : copyTensor(v as TensorValue)) : v;
