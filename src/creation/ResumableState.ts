/**
 * `ResumableState`: state that is not a graph variable but must be checkpointed with the
 * variables for a restart to continue at exactly the step it stopped: a data iterator's
 * position, an RNG's state, a hook's counters. Register each piece under a name; wrap the
 * session's {@link VariableStore} (or its session factory) and every saver that saves that
 * store saves the registered state in the same checkpoint, and every restore restores it.
 *
 * Snapshots stay consistent: `save()` of every entry is called synchronously inside
 * `store.snapshot()`, in the same tick as the variables' snapshot, so a checkpoint never pairs
 * the variables of step k with the iterator of step k+1.
 *
 * @example
 * ```ts
 * // @prelude docs/preludes/session.ts
 * import * as t from "io-ts";
 * import { ChiefSessionCreator, MonitoredSession, ResumableState } from "monitored-session";
 * import { CheckpointSaverHook } from "monitored-session/hooks";
 *
 * // Your input pipeline and random generator, with state that must survive a restart.
 * declare const it: { position(): { epoch: number; offset: number }; seek(p: { epoch: number; offset: number }): void };
 * declare const rng: { state(): number; setState(s: number): void };
 * const IteratorPosition = t.type({ epoch: t.number, offset: t.number });
 * const checkpointDir = "/runs/exp1";
 *
 * const state = new ResumableState()
 *   .register("data/iterator", { save: () => it.position(), restore: (p) => it.seek(p) }, { codec: IteratorPosition })
 *   .register("rng", { save: () => rng.state(), restore: (s) => rng.setState(s) });
 * const monitored = await MonitoredSession.create({
 *   sessionCreator: new ChiefSessionCreator({ graph, checkpointDir, sessionFactory: state.sessionFactory(() => graph.session()) }),
 *   hooks: [new CheckpointSaverHook({ checkpointDir, saveSteps: 100 })],
 * });
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import { decodeLines } from "../codec.js";
import { InvalidArgumentError, NotFoundError, ValueError } from "../errors.js";
import { isPromiseLike } from "../util/promise.js";
import type { SessionFactory } from "./SessionManager.js";
import type { Session, VariableCollection, VariableStore } from "../session/Session.js";
import { isTensorValue, tensor, type TensorValue } from "../session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A JSON value: what a JSON entry's `save()` returns. */
export type Json = null | boolean | number | string | readonly Json[] | { readonly [key: string]: Json };

/**
 * One piece of registered state. `save()` must be synchronous (it runs inside the variables'
 * snapshot); `restore` may be async.
 */
export interface ResumableEntry<T> {
  /** The current state. Called at every checkpoint. */
  save(): T;
  /** Sets the state from a checkpoint. */
  restore(value: T): void | Promise<void>;
}

/** Options of {@link ResumableState.register}. */
export interface RegisterOptions<T> {
  /**
   * Decodes the restored JSON (the checkpoint is external input). A failure lists every
   * problem with its path. Default: any JSON value.
   */
  readonly codec?: t.Decoder<unknown, T> | undefined;
  /**
   * If `true`, a checkpoint without this entry restores the rest and leaves this state as it is
   * (for state added after checkpoints were written). Default `false`: `NotFoundError`.
   */
  readonly optional?: boolean | undefined;
}

interface Registered {
  readonly name: string;
  readonly kind: "json" | "tensor";
  readonly entry: ResumableEntry<unknown>;
  readonly codec: t.Decoder<unknown, unknown> | undefined;
  readonly optional: boolean;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A registry of named state saved and restored beside a session's variables. */
export class ResumableState {
  private readonly entries = new Map<string, Registered>();

  /**
   * Registers JSON state under `name`. It is stored as a scalar `string` tensor holding the
   * JSON text. Throws `ValueError` if the name is empty or taken.
   */
  register<T extends Json>(name: string, entry: ResumableEntry<T>, options: RegisterOptions<T> = {}): this {
    return this.add(name, "json", entry as ResumableEntry<unknown>, options.codec, options.optional);
  }

  /** Registers tensor state under `name`, stored as the tensor itself. */
  registerTensor(name: string, entry: ResumableEntry<TensorValue>, options: { readonly optional?: boolean } = {}): this {
    return this.add(name, "tensor", entry as ResumableEntry<unknown>, undefined, options.optional);
  }

  /** The registered names, in registration order. */
  names(): readonly string[] {
    return [...this.entries.keys()];
  }

  /**
   * A store that holds `inner`'s variables plus the registered state, as global variables.
   * Throws `ValueError` if a registered name is also a variable of `inner`.
   */
  wrap(inner: VariableStore): VariableStore {
    const clash = inner.names("all").filter((n) => this.entries.has(n));
    if (clash.length > 0) {
      throw new ValueError(`ResumableState: registered name(s) ${clash.map((n) => `"${n}"`).join(", ")} are also variables of the session`);
    }
    const entries = [...this.entries.values()];
    const withGlobal = (c: VariableCollection): boolean => c === "global" || c === "all";
    return {
      names: (c = "all") => (withGlobal(c) ? [...inner.names(c), ...entries.map((e) => e.name)] : inner.names(c)),
      reportUninitialized: (c) => inner.reportUninitialized(c),
      initialize: (c) => inner.initialize(c),
      snapshot: (c = "global") => {
        // The registered state is encoded now, with the variables' snapshot of the same step,
        // even when the inner store resolves its snapshot later.
        const extra = withGlobal(c) ? entries.map((e) => [e.name, encode(e)] as const) : [];
        const add = (out: Map<string, TensorValue>): Map<string, TensorValue> => {
          for (const [name, value] of extra) out.set(name, value);
          return out;
        };
        const out = inner.snapshot(c);
        return isPromiseLike(out) ? Promise.resolve(out).then(add) : add(out);
      },
      // The registered state sits at its own names in an object graph (objectGraph.ts).
      ...(inner.objectPaths === undefined ? {} : { objectPaths: inner.objectPaths.bind(inner) }),
      restore: async (values, options) => {
        const rest = new Map<string, TensorValue>();
        for (const [k, v] of values) if (!this.entries.has(k)) rest.set(k, v);
        // Decode everything before changing anything: a bad entry leaves all state untouched.
        const decoded: [Registered, unknown][] = [];
        const problems: string[] = [];
        const missing: string[] = [];
        for (const e of entries) {
          const v = values.get(e.name);
          if (v === undefined) {
            // A checkpoint TensorFlow wrote has none of it: the state stays as it is.
            if (!e.optional && options?.fromObjectGraph !== true) missing.push(e.name);
            continue;
          }
          try {
            decoded.push([e, decode(e, v)]);
          } catch (err) {
            problems.push((err as Error).message);
          }
        }
        if (missing.length > 0) {
          throw new NotFoundError(
            `The checkpoint holds no value for registered state ${missing.map((n) => `"${n}"`).join(", ")} (register it with { optional: true } if older checkpoints lack it)`,
          );
        }
        if (problems.length > 0) throw new InvalidArgumentError(`Invalid registered state in the checkpoint:\n  ${problems.join("\n  ")}`);
        await inner.restore(rest, options);
        for (const [e, v] of decoded) await e.entry.restore(v);
      },
    };
  }

  /** `session` with its variables wrapped by {@link wrap}. Throws `ValueError` if it has none. */
  wrapSession(session: Session): Session {
    const inner = session.variables;
    if (inner === undefined) throw new ValueError("ResumableState.wrapSession: the session exposes no variables to save state beside");
    const variables = this.wrap(inner);
    return {
      run: (fetches, feeds, options, runMetadata) => session.run(fetches, feeds, options, runMetadata),
      close: () => session.close?.(),
      variables,
      globalStepName: session.globalStepName,
    } as Session;
  }

  /** A factory whose sessions are `factory`'s, wrapped by {@link wrapSession}. */
  sessionFactory(factory: SessionFactory): SessionFactory {
    return async () => this.wrapSession(await factory());
  }

  private add(
    name: string,
    kind: "json" | "tensor",
    entry: ResumableEntry<unknown>,
    codec: t.Decoder<unknown, unknown> | undefined,
    optional: boolean | undefined,
  ): this {
    if (name.length === 0) throw new ValueError("ResumableState: a name must not be empty");
    if (this.entries.has(name)) throw new ValueError(`ResumableState: "${name}" is already registered`);
    if (typeof entry?.save !== "function" || typeof entry.restore !== "function") {
      throw new ValueError(`ResumableState: "${name}" needs save() and restore(value) functions`);
    }
    this.entries.set(name, { name, kind, entry, codec, optional: optional ?? false });
    return this;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const encode = (e: Registered): TensorValue => {
  const v = e.entry.save();
  if (isPromiseLike(v)) throw new ValueError(`ResumableState: save() of "${e.name}" returned a promise; it must be synchronous`);
  if (e.kind === "tensor") {
    if (!isTensorValue(v)) throw new ValueError(`ResumableState: save() of tensor state "${e.name}" did not return a TensorValue`);
    return v;
  }
  const text = JSON.stringify(v);
  if (text === undefined) throw new ValueError(`ResumableState: save() of "${e.name}" returned a value that is not JSON`);
  return tensor("string", [], [text]);
};

const decode = (e: Registered, v: TensorValue): unknown => {
  if (e.kind === "tensor") return v;
  if (v.dtype !== "string" || v.shape.length !== 0) {
    throw new InvalidArgumentError(`"${e.name}": expected a scalar string tensor of JSON, got ${v.dtype}[${v.shape.join(", ")}]`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse((v.data as readonly string[])[0] as string);
  } catch (err) {
    throw new InvalidArgumentError(`"${e.name}": not valid JSON (${(err as Error).message})`);
  }
  if (e.codec === undefined) return parsed;
  return pipe(
    decodeLines(e.codec, parsed),
    E.getOrElseW((problems) => {
      throw new InvalidArgumentError(`"${e.name}": ${problems.join("; ")}`);
    }),
  );
};

