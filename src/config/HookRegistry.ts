/**
 * `HookRegistry`: the hook types a configuration file may name in `hooks: [{ type, ...options }]`,
 * each with the codec of its options and a factory. The built-in hooks that can be configured
 * without code are pre-registered; users register their own by name.
 *
 * `FeedFnHook` (a function) and `FinalOpsHook` (values read by code) are not registered: give
 * them in the job's `hooks` instead.
 *
 * @example
 * ```ts
 * import { decodeConfig, HookRegistry, PositiveInt, required, struct } from "monitored-session/config";
 * import { SessionRunHook } from "monitored-session";
 *
 * class EarlyStoppingHook extends SessionRunHook {
 *   constructor(readonly options: { readonly patienceSteps: number }) {
 *     super();
 *   }
 * }
 * declare const input: unknown; // the parsed YAML or JSON
 *
 * const registry = HookRegistry.withBuiltins().register({
 *   type: "EarlyStoppingHook",
 *   doc: "Stops when the loss stops improving.",
 *   codec: struct("EarlyStoppingHook", "Stops when the loss stops improving.", {
 *     patienceSteps: required(PositiveInt, "Steps without improvement before stopping."),
 *   }),
 *   create: (options) => new EarlyStoppingHook(options),
 * });
 * const config = decodeConfig(input, registry);
 * ```
 *
 * @module
 */

import * as t from "io-ts";

import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { GlobalStepWaiterHook } from "../../hooks/GlobalStepWaiterHook.js";
import { LoggingTensorHook, TensorNames } from "../../hooks/LoggingTensorHook.js";
import { NanTensorHook } from "../../hooks/NanTensorHook.js";
import { ProfilerHook } from "../../hooks/ProfilerHook.js";
import { StepCounterHook } from "../../hooks/StepCounterHook.js";
import { StopAtStepHook } from "../../hooks/StopAtStepHook.js";
import { SummarySaverHook } from "../../hooks/SummarySaverHook.js";
import { ValueError } from "../errors.js";
import type { Scaffold } from "../creation/Scaffold.js";
import type { RetentionPolicy } from "../checkpoint/index.js";
import type { Fetches } from "../session/Session.js";
import { hookProblems, type SessionRunHook } from "../hook/SessionRunHook.js";
import { closest, optional, refined, show } from "../codec.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A decoded entry of `hooks`: its `type` and its decoded options. */
export interface HookConfig {
  readonly type: string;
  readonly [option: string]: unknown;
}

/** What a hook factory receives besides its options. */
export interface HookFactoryContext {
  /** Resolves a path of the configuration (relative to the configuration file's directory). */
  resolvePath(path: string): string;
  /** The scaffold the session is built with (its saver and summary op). */
  readonly scaffold: Scaffold;
}

/** A hook type: its name in `type`, the codec of its options, and how to make the hook. */
export interface HookType<A> {
  /** The value of `type` in the configuration. */
  readonly type: string;
  /** Decodes the options (every key but `type`). A {@link struct} also documents them. */
  readonly codec: t.Type<A, unknown, unknown>;
  /** Makes the hook from decoded options. May throw (reported as a configuration problem). */
  readonly create: (options: A, context: HookFactoryContext) => SessionRunHook;
  /** One sentence for the reference. */
  readonly doc?: string;
  /**
   * The graph names the options refer to, as `[option path, name]` pairs (`["lossTensor",
   * "loss"]`), so they are checked against the session before anything is written.
   */
  readonly names?: (options: A) => readonly (readonly [path: string, name: string])[];
}

/**
 * A retention policy a configuration names in `checkpoint.retention` (`{ type, ...options }`),
 * registered by a plugin with {@link HookRegistry.registerRetention}, as hook types are.
 *
 * @example
 * ```ts
 * // my-retention.ts, named in the configuration as `plugins: [./my-retention.js]`
 * import { definePlugin, PositiveInt, required, struct } from "monitored-session/config";
 * import { Retention } from "monitored-session/checkpoint";
 *
 * export default definePlugin((registry) => {
 *   registry.registerRetention({
 *     type: "NewestAndEveryNth",
 *     codec: struct("NewestAndEveryNth", "The newest few, and every Nth checkpoint.", {
 *       newest: required(PositiveInt, "How many of the newest stay."),
 *       every: required(PositiveInt, "Every checkpoint whose number is a multiple of this stays."),
 *     }),
 *     create: (o) =>
 *       Retention.union(Retention.maxToKeep(o.newest), (cps) => ({ keep: cps.filter((c) => c.checkpointNumber !== null && c.checkpointNumber % o.every === 0).map((c) => c.path) })),
 *   });
 * });
 * ```
 */
export interface RetentionType<A> {
  /** The value of `type` in `checkpoint.retention`. */
  readonly type: string;
  /** Decodes the options (every key but `type`). */
  readonly codec: t.Type<A, unknown, unknown>;
  /** Makes the policy from decoded options. May throw (reported as a configuration problem). */
  readonly create: (options: A) => RetentionPolicy;
  /** One sentence for the reference. */
  readonly doc?: string;
}

/** A decoded `checkpoint.retention` entry: a registered retention type and its options. */
export type RetentionConfig = { readonly type: string } & Readonly<Record<string, unknown>>;

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

let sharedBuiltins: HookRegistry | undefined;

/** The hook types a configuration may use. */
export class HookRegistry {
  private readonly entries = new Map<string, HookType<unknown>>();
  private readonly retentions = new Map<string, RetentionType<unknown>>();

  private constructor(private readonly frozen: boolean) {}

  /** An empty registry. */
  static empty(): HookRegistry {
    return new HookRegistry(false);
  }

  /** A new registry holding the built-in hook types, to which more can be registered. */
  static withBuiltins(): HookRegistry {
    const r = new HookRegistry(false);
    for (const h of builtinHookTypes) r.register(h);
    return r;
  }

  /** The shared registry of built-ins used when none is given. It cannot be changed. */
  static get builtins(): HookRegistry {
    sharedBuiltins ??= HookRegistry.withBuiltins().freeze();
    return sharedBuiltins;
  }

  /**
   * Registers a hook type. Throws `ValueError` for a name already registered, or on
   * {@link HookRegistry.builtins} (make your own with {@link HookRegistry.withBuiltins}).
   */
  register<A>(hook: HookType<A>): this {
    this.add("hook type", this.entries, hook as HookType<unknown>);
    return this;
  }

  /**
   * Registers a retention policy type for `checkpoint.retention`. Throws `ValueError` for a name
   * already registered, or on {@link HookRegistry.builtins}.
   */
  registerRetention<A>(retention: RetentionType<A>): this {
    this.add("retention type", this.retentions, retention as RetentionType<unknown>);
    return this;
  }

  /** Adds `entry` to `entries`, unless this registry is the frozen built-ins or the name is taken. */
  private add<E extends { readonly type: string }>(what: string, entries: Map<string, E>, entry: E): void {
    if (this.frozen) throw new ValueError("HookRegistry.builtins cannot be changed; register on HookRegistry.withBuiltins() instead");
    if (typeof entry.type !== "string" || entry.type.length === 0) throw new ValueError(`a ${what} needs a non-empty name`);
    if (entries.has(entry.type)) throw new ValueError(`${what} "${entry.type}" is already registered`);
    entries.set(entry.type, entry);
  }

  /** The registered retention type names, in registration order. */
  get retentionTypes(): readonly string[] {
    return [...this.retentions.keys()];
  }

  /** The codec of `checkpoint.retention`: an object whose `type` names a registered retention type, the other keys its options. */
  retentionEntryCodec(): t.Type<RetentionConfig, RetentionConfig, unknown> {
    const registered = (): string => (this.retentions.size === 0 ? "none is registered (a plugin registers one with registry.registerRetention)" : `registered: ${this.retentionTypes.join(", ")}`);
    return typedEntryCodec("retention policy", this.retentions, registered, registered, "retention type");
  }

  /** Makes the policy of a decoded `checkpoint.retention` entry. Throws `ValueError` for an unregistered type, or a factory that returns no function. */
  createRetention(entry: RetentionConfig): RetentionPolicy {
    const r = this.retentions.get(entry.type);
    if (r === undefined) throw new ValueError(`unknown retention type "${entry.type}"`);
    const { type: _type, ...options } = entry;
    const made: unknown = r.create(options);
    if (typeof made !== "function") throw new ValueError(`the factory of retention type "${entry.type}" did not return a RetentionPolicy (a function of the checkpoints), got ${show(made)}`);
    return made as RetentionPolicy;
  }

  /** The registered type named `type`, if any. */
  get(type: string): HookType<unknown> | undefined {
    return this.entries.get(type);
  }

  /** The registered type names, in registration order. */
  get types(): readonly string[] {
    return [...this.entries.keys()];
  }

  /** The registered types, in registration order. */
  get hookTypes(): readonly HookType<unknown>[] {
    return [...this.entries.values()];
  }

  /**
   * The codec of one `hooks` entry: an object whose `type` names a registered hook type, the
   * other keys being that type's options.
   */
  entryCodec(): t.Type<HookConfig, HookConfig, unknown> {
    return typedEntryCodec("hook", this.entries, () => `registered: ${this.types.join(", ")}`, (types) => `one of ${types.join(", ")}`);
  }

  /**
   * Instantiates a decoded entry. Throws `ValueError` for an unregistered type, or when the
   * factory (a plugin's JavaScript, say) returns something that is not a hook.
   */
  create(entry: HookConfig, context: HookFactoryContext): SessionRunHook {
    const hook = this.entries.get(entry.type);
    if (hook === undefined) throw new ValueError(`unknown hook type "${entry.type}"`);
    const { type: _type, ...options } = entry;
    const made: unknown = hook.create(options, context);
    const problems = hookProblems(made);
    if (problems.length > 0) throw new ValueError(`the factory of hook type "${entry.type}" did not return a SessionRunHook (${problems.join("; ")})`);
    return made as SessionRunHook;
  }

  /** The graph names a decoded entry refers to, by its type's `names` (none if it has none). */
  namesOf(entry: HookConfig): readonly (readonly [path: string, name: string])[] {
    const hook = this.entries.get(entry.type);
    if (hook?.names === undefined) return [];
    const { type: _type, ...options } = entry;
    return hook.names(options);
  }

  private freeze(): HookRegistry {
    const f = new HookRegistry(true);
    for (const [k, v] of this.entries) f.entries.set(k, v);
    for (const [k, v] of this.retentions) f.retentions.set(k, v);
    return f;
  }
}

// ---------------------------------------------------------------------------------------------
// built-in hook codecs
// ---------------------------------------------------------------------------------------------

const isFetches = (u: unknown, depth = 0): u is Fetches =>
  depth < 32 &&
  (u === null ||
    (typeof u === "string" && u.length > 0) ||
    (Array.isArray(u) && u.every((x) => isFetches(x, depth + 1))) ||
    (typeof u === "object" && u !== null && !Array.isArray(u) && Object.values(u).every((x) => isFetches(x, depth + 1))));

/** Fetches: a name, or lists and records of names. */
export const FetchesCodec = refined("fetches (a name, or lists and records of names)", (u): u is Fetches => isFetches(u));

/** The names in `fetches` with their paths under `path` (`summaryOp.loss`, `fetches[1]`). */
export const namesIn = (fetches: Fetches, path: string): (readonly [path: string, name: string])[] => {
  if (typeof fetches === "string") return [[path, fetches]];
  if (fetches === null) return [];
  if (Array.isArray(fetches)) return (fetches as readonly Fetches[]).flatMap((f, i) => namesIn(f, `${path}[${i}]`));
  return Object.entries(fetches as Record<string, Fetches>).flatMap(([k, f]) => namesIn(f, `${path}.${k}`));
};

// Each hook owns the codec of its options (the constructor decodes with it); a file gives paths
// where code may pass objects, so a few fields become required or take a data form here.

/** Options of `StopAtStepHook` in a file. */
export const StopAtStepHookConfig = StopAtStepHook.optionsCodec;
/** Options of `NanTensorHook` in a file. */
export const NanTensorHookConfig = NanTensorHook.optionsCodec;
/** Options of `LoggingTensorHook` in a file. */
export const LoggingTensorHookConfig = LoggingTensorHook.optionsCodec;
/** Options of `StepCounterHook` in a file. */
export const StepCounterHookConfig = StepCounterHook.optionsCodec;
/** Options of `GlobalStepWaiterHook` in a file. */
export const GlobalStepWaiterHookConfig = GlobalStepWaiterHook.optionsCodec;
/** Options of `CheckpointSaverHook` in a file (besides the one `checkpoint` builds): `checkpointDir` is required. */
export const CheckpointSaverHookConfig = CheckpointSaverHook.optionsCodec.require("checkpointDir");
/** Options of `SummarySaverHook` in a file (besides the one `summaries` builds): `outputDir` is required, `summaryOp` is fetches. */
export const SummarySaverHookConfig = SummarySaverHook.optionsCodec
  .extend({ summaryOp: optional(FetchesCodec, "The summary fetches.", "the scaffold's summary op") })
  .require("outputDir");

/** Options of `ProfilerHook` in a file: `outputDir` is required (relative to the file). */
export const ProfilerHookConfig = ProfilerHook.optionsCodec.require("outputDir");

const definedOnly = <A extends object>(a: A): { [K in keyof A]-?: Exclude<A[K], undefined> } =>
  Object.fromEntries(Object.entries(a).filter(([, v]) => v !== undefined)) as never;

/** The built-in hook types, in the order of the reference. */
export const builtinHookTypes: readonly HookType<never>[] = [
  {
    type: "StopAtStepHook",
    doc: StopAtStepHookConfig.doc,
    codec: StopAtStepHookConfig,
    create: (o: t.TypeOf<typeof StopAtStepHookConfig>) => new StopAtStepHook(o),
  },
  {
    type: "NanTensorHook",
    doc: NanTensorHookConfig.doc,
    codec: NanTensorHookConfig,
    create: (o: t.TypeOf<typeof NanTensorHookConfig>) => new NanTensorHook(o),
    names: (o: t.TypeOf<typeof NanTensorHookConfig>) => [["lossTensor", o.lossTensor]],
  },
  {
    type: "LoggingTensorHook",
    doc: LoggingTensorHookConfig.doc,
    codec: LoggingTensorHookConfig,
    create: (o: t.TypeOf<typeof LoggingTensorHookConfig>) => new LoggingTensorHook(o),
    names: (o: t.TypeOf<typeof LoggingTensorHookConfig>) =>
      Array.isArray(o.tensors) ? o.tensors.map((n, i) => [`tensors[${i}]`, n]) : Object.entries(o.tensors).map(([k, n]) => [`tensors.${k}`, n]),
  },
  {
    type: "StepCounterHook",
    doc: StepCounterHookConfig.doc,
    codec: StepCounterHookConfig,
    // In a file, giving everyNSecs means counting by seconds: the step default gives way.
    create: (o: t.TypeOf<typeof StepCounterHookConfig>, ctx: HookFactoryContext) =>
      new StepCounterHook({
        ...definedOnly(o),
        ...(o.everyNSecs === undefined || o.everyNSecs === null ? {} : { everyNSteps: null }),
        ...(o.outputDir === undefined ? {} : { outputDir: ctx.resolvePath(o.outputDir) }),
      }),
  },
  {
    type: "GlobalStepWaiterHook",
    doc: GlobalStepWaiterHookConfig.doc,
    codec: GlobalStepWaiterHookConfig,
    create: (o: t.TypeOf<typeof GlobalStepWaiterHookConfig>) => new GlobalStepWaiterHook(o),
  },
  {
    type: "CheckpointSaverHook",
    doc: CheckpointSaverHookConfig.doc,
    codec: CheckpointSaverHookConfig,
    create: (o: t.TypeOf<typeof CheckpointSaverHookConfig>, ctx: HookFactoryContext) =>
      new CheckpointSaverHook({ ...definedOnly(o), checkpointDir: ctx.resolvePath(o.checkpointDir), scaffold: ctx.scaffold }),
  },
  {
    type: "SummarySaverHook",
    doc: SummarySaverHookConfig.doc,
    codec: SummarySaverHookConfig,
    create: (o: t.TypeOf<typeof SummarySaverHookConfig>, ctx: HookFactoryContext) =>
      new SummarySaverHook({
        ...definedOnly(o),
        outputDir: ctx.resolvePath(o.outputDir),
        ...(o.summaryOp === undefined ? { scaffold: ctx.scaffold } : { summaryOp: o.summaryOp }),
      }),
    names: (o: t.TypeOf<typeof SummarySaverHookConfig>) => (o.summaryOp === undefined ? [] : namesIn(o.summaryOp, "summaryOp")),
  },
  {
    type: "ProfilerHook",
    doc: ProfilerHookConfig.doc,
    codec: ProfilerHookConfig,
    create: (o: t.TypeOf<typeof ProfilerHookConfig>, ctx: HookFactoryContext) => new ProfilerHook({ ...definedOnly(o), outputDir: ctx.resolvePath(o.outputDir) }),
  },
] as unknown as readonly HookType<never>[];

/** Tensor names: a list, or a record of tags to names (the codec of `LoggingTensorHook`'s `tensors`). */
export { TensorNames };

/**
 * The codec of an entry `{ type, ...options }` whose `type` names one of `entries` (hook types,
 * retention types), the other keys being its options; `registered()` says what may be named.
 */
const typedEntryCodec = <E extends { readonly type: string }>(
  what: string,
  entries: ReadonlyMap<string, { readonly type: string; readonly codec: t.Type<unknown, unknown, unknown> }>,
  registered: () => string,
  required: (types: readonly string[]) => string,
  typeName = `${what} type`,
): t.Type<E, E, unknown> =>
  new t.Type<E, E, unknown>(
    `a ${what} ({ type, ...options })`,
    (u): u is E => typeof u === "object" && u !== null && typeof (u as { type?: unknown }).type === "string",
    (u, c) => {
      if (typeof u !== "object" || u === null || Array.isArray(u)) return t.failure(u, c, `expected a ${what} object ({ type: "...", ...options }), got ${show(u)}`);
      const { type, ...options } = u as Record<string, unknown>;
      const typeContext = [...c, { key: "type", type: t.string, actual: type }];
      const names = [...entries.keys()];
      if (type === undefined) return t.failure(type, typeContext, `is required (${required(names)})`);
      const entry = typeof type === "string" ? entries.get(type) : undefined;
      if (entry === undefined) {
        // The "did you mean" of an unknown field, for a misspelled type.
        const hint = typeof type === "string" ? closest(type, names) : undefined;
        return t.failure(type, typeContext, `unknown ${typeName} ${show(type)}${hint === undefined ? "" : ` (did you mean "${hint}"?)`}; ${registered()}`);
      }
      const r = entry.codec.validate(options, c);
      return r._tag === "Left" ? r : t.success({ ...(r.right as object), type: entry.type } as unknown as E);
    },
    (a) => a,
  );
