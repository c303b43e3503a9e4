/**
 * The one io-ts kit of the project, used at every boundary: configuration files, hook options,
 * checkpoint manifests and state files, lock files, summary writer options. It holds strict
 * documented objects ({@link struct}, {@link strictType}), the scalar codecs they use, and the
 * one reporter that turns io-ts errors into {@link Issue}s, each with its path
 * (`hooks[1].everyNSecs: expected a positive number, got -1`).
 *
 * A {@link StructType} keeps its fields (codec, optional or not, description, default), so the
 * reference in docs/configuration.md is generated from the codecs themselves, and a hook's
 * constructor and the configuration registry decode its options with the same codec.
 *
 * @example
 * ```ts
 * import { decodeOptions, defaulted, NonEmptyString, PositiveInt, required, struct } from "monitored-session/config";
 *
 * const MyHookOptions = struct("MyHook", "Sends the loss somewhere.", {
 *   url: required(NonEmptyString, "Where to send it."),
 *   everyNSteps: defaulted(PositiveInt, "How often.", 100),
 * });
 * const o = decodeOptions(MyHookOptions, { url: "http://127.0.0.1:8080" }, "MyHook"); // { url, everyNSteps: 100 }
 * ```
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import { ValueError } from "./errors.js";
import { DTYPES, type DType } from "./session/Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One problem of an input: where (`hooks[1].everyNSecs`) and what. */
export interface Issue {
  /** The path in the input, `.key` and `[index]`; `(root)` for the whole document. */
  readonly path: string;
  readonly message: string;
  /** 1-based line in the file, when known (syntax errors, and decode errors of YAML/JSON files). */
  readonly line?: number;
  /** 1-based column in the file, when known. */
  readonly column?: number;
}

/** A field of a {@link struct}: its codec, whether it may be left out, its description and default. */
export interface FieldSpec<C extends t.Mixed = t.Mixed, O extends boolean = boolean> {
  readonly codec: C;
  readonly optional: O;
  /** One sentence for the reference. */
  readonly doc: string;
  /** What leaving it out means, as shown in the reference (e.g. `600`, `checkpoint.dir`). */
  readonly defaultValue?: string | undefined;
  /** The value {@link decodeOptions} gives an absent field made with {@link defaulted}. */
  readonly value?: unknown;
}

/** A field with a default value: {@link decodeOptions} fills it in. Make one with {@link defaulted}. */
export type DefaultedField<C extends t.Mixed = t.Mixed> = FieldSpec<C, true> & { readonly value: t.TypeOf<C> };

type DefaultedKeys<F extends Fields> = { [K in keyof F]: F[K] extends { readonly value: unknown } ? K : never }[keyof F];

/** What {@link decodeOptions} returns: a {@link StructOf} whose defaulted fields are present. */
export type WithDefaults<F extends Fields> = Simplify<StructOf<F> & { readonly [K in DefaultedKeys<F>]: t.TypeOf<F[K]["codec"]> }>;

/** The fields of a {@link struct}. */
export type Fields = { readonly [key: string]: FieldSpec };

type RequiredKeys<F extends Fields> = { [K in keyof F]: F[K]["optional"] extends true ? never : K }[keyof F];
type OptionalKeys<F extends Fields> = { [K in keyof F]: F[K]["optional"] extends true ? K : never }[keyof F];
type Simplify<T> = { [K in keyof T]: T[K] } & {};

/** The decoded value of a {@link struct}: required fields present, optional ones possibly absent. */
export type StructOf<F extends Fields> = Simplify<
  { readonly [K in RequiredKeys<F>]: t.TypeOf<F[K]["codec"]> } & { readonly [K in OptionalKeys<F>]?: t.TypeOf<F[K]["codec"]> }
>;

/** A cross-field rule of a {@link struct}: the problems of a value whose fields each decoded. */
export type StructCheck<A> = (value: A) => readonly { readonly key?: string; readonly message: string }[];

/** A strict object codec that remembers its fields for documentation. Make one with {@link struct}. */
export class StructType<F extends Fields> extends t.Type<StructOf<F>, StructOf<F>, unknown> {
  readonly _tag = "StructType" as const;

  constructor(
    name: string,
    /** What the object configures (first line of its section in the reference). */
    readonly doc: string,
    readonly fields: F,
    readonly checks: readonly StructCheck<StructOf<F>>[],
  ) {
    const holder: { self?: StructType<F> } = {};
    super(
      name,
      (u): u is StructOf<F> => validateStruct(holder.self as StructType<F>, u, [])._tag === "Right",
      (u, c) => validateStruct(holder.self as StructType<F>, u, c),
      (a) => a,
    );
    holder.self = this;
  }

  /**
   * The same struct with more fields (or fields replaced), and the same checks: how the
   * configuration adds a data form of an option the constructor takes as code.
   */
  extend<G extends Fields>(fields: G): StructType<Omit<F, keyof G> & G> {
    return new StructType(this.name, this.doc, { ...this.fields, ...fields } as Omit<F, keyof G> & G, this.checks as never);
  }

  /** The same struct with `keys` required (a path a file must give, where code may pass an object instead). */
  require<K extends keyof F & string>(...keys: readonly K[]): StructType<Omit<F, K> & { readonly [P in K]: FieldSpec<F[P]["codec"], false> }> {
    const fields: Record<string, FieldSpec> = { ...this.fields };
    for (const k of keys) fields[k] = { ...(this.fields[k] as FieldSpec), optional: false, defaultValue: undefined };
    return new StructType(this.name, this.doc, fields, this.checks as never) as unknown as StructType<
      Omit<F, K> & { readonly [P in K]: FieldSpec<F[P]["codec"], false> }
    >;
  }
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A field that must be given. */
export const required = <C extends t.Mixed>(codec: C, doc: string): FieldSpec<C, false> => ({ codec, optional: false, doc });

/** A field that may be left out; `defaultValue` says what that means, for the reference. */
export const optional = <C extends t.Mixed>(codec: C, doc: string, defaultValue?: string): FieldSpec<C, true> => ({
  codec,
  optional: true,
  doc,
  defaultValue,
});

/**
 * A field that may be left out, with the value it then takes. The value is the one default of
 * the option: {@link decodeOptions} (a constructor) fills it in, and the reference shows it. A
 * file's decoded configuration keeps the field absent; the constructor fills it.
 */
export const defaulted = <C extends t.Mixed>(codec: C, doc: string, value: t.TypeOf<C>): DefaultedField<C> => ({
  codec,
  optional: true,
  doc,
  defaultValue: typeof value === "string" ? value : JSON.stringify(value),
  value,
});

/**
 * A strict object: unknown keys are errors naming them (with a suggestion for a likely typo),
 * a missing required field is an error, and every field's problems are reported. `checks`
 * (e.g. "not both secs and steps") run even when a field failed, seeing its raw value.
 */
export const struct = <F extends Fields>(
  name: string,
  doc: string,
  fields: F,
  ...checks: readonly StructCheck<StructOf<F>>[]
): StructType<F> => new StructType(name, doc, fields, checks);

/**
 * A strict object from io-ts props: like `t.type`, but unknown keys are errors naming them (as
 * in TensorFlow's text-format parser). For inputs that need no reference documentation
 * (checkpoint manifests and state files); configuration uses {@link struct}.
 */
export const strictType = <P extends t.Props>(props: P, name: string): t.Type<t.TypeOfProps<P>, t.OutputOfProps<P>, unknown> => {
  const base = t.type(props, name);
  const names = Object.keys(props);
  return new t.Type<t.TypeOfProps<P>, t.OutputOfProps<P>, unknown>(
    name,
    (u): u is t.TypeOfProps<P> => base.is(u) && Object.keys(u as object).every((k) => Object.hasOwn(props, k)),
    (u, c) => {
      const unknown = isPlainObject(u) ? unknownKeyErrors(u, names, name, c) : [];
      return pipe(
        base.validate(u, c),
        E.mapLeft((errors) => [...errors, ...unknown]),
        E.chain((a) => (unknown.length > 0 ? t.failures(unknown) : t.success(a))),
      );
    },
    (a) => base.encode(a),
  );
};

/** A codec from a predicate; its name is the expectation shown in messages ("a positive number"). */
export const refined = <A>(name: string, is: (u: unknown) => u is A): t.Type<A, A, unknown> =>
  new t.Type<A, A, unknown>(name, is, (u, c) => (is(u) ? t.success(u) : t.failure(u, c)), (a) => a);

/**
 * The first of `codecs` that accepts the value; a value none accepts is one problem,
 * `expected <name>, got ...` (not one per alternative, as `t.union` would report).
 */
export const oneOf = <C extends readonly [t.Mixed, ...t.Mixed[]]>(name: string, codecs: C): t.Type<t.TypeOf<C[number]>, t.TypeOf<C[number]>, unknown> =>
  new t.Type<t.TypeOf<C[number]>, t.TypeOf<C[number]>, unknown>(
    name,
    (u): u is t.TypeOf<C[number]> => codecs.some((k) => k.is(u)),
    (u, c) => {
      for (const k of codecs) {
        const r = k.validate(u, c);
        if (r._tag === "Right") return r;
      }
      return t.failure(u, c);
    },
    (a) => a,
  );

/** A non-empty string. */
export const NonEmptyString = refined("a non-empty string", (u): u is string => typeof u === "string" && u.length > 0);
/** A plain file name: not empty, no `/` or `\\`, not `.` or `..`, no NUL (a checkpoint basename, say). */
export const FileName = refined(
  "a plain file name (no /, \\ or .., not empty)",
  (u): u is string => typeof u === "string" && u.length > 0 && u !== "." && u !== ".." && !/[/\\\u0000]/.test(u),
);
/** A finite number > 0. */
export const PositiveNumber = refined("a positive number", (u): u is number => typeof u === "number" && Number.isFinite(u) && u > 0);
/** A finite number >= 0. */
export const NonNegativeNumber = refined("a number >= 0", (u): u is number => typeof u === "number" && Number.isFinite(u) && u >= 0);
/** An integer > 0. */
export const PositiveInt = refined("a positive integer", (u): u is number => typeof u === "number" && Number.isSafeInteger(u) && u > 0);
/** A safe integer, possibly negative. */
export const SafeInt = refined("a safe integer", (u): u is number => typeof u === "number" && Number.isSafeInteger(u));
/** An unsigned 32-bit integer (a CRC). */
export const Uint32 = refined("an unsigned 32-bit integer", (u): u is number => typeof u === "number" && Number.isInteger(u) && u >= 0 && u <= 0xffffffff);
/** An integer >= 0. */
export const NonNegativeInt = refined("an integer >= 0", (u): u is number => typeof u === "number" && Number.isSafeInteger(u) && u >= 0);
/** A process exit code, 0 to 255. */
export const ExitCode = refined("an exit code (integer 0-255)", (u): u is number => typeof u === "number" && Number.isInteger(u) && u >= 0 && u <= 255);
/** A boolean. */
export const Bool = refined("true or false", (u): u is boolean => typeof u === "boolean");

/** A cadence: a number >= 0 (`0` disables) or `null` (disables). */
export const Cadence = refined("a number >= 0 or null", (u): u is number | null => u === null || (typeof u === "number" && Number.isFinite(u) && u >= 0));
/** A step cadence: an integer >= 0 (`0` disables) or `null` (disables). */
export const StepCadence = refined("an integer >= 0 or null", (u): u is number | null => u === null || (typeof u === "number" && Number.isSafeInteger(u) && u >= 0));
/** A tensor's dtype (`"float32"`, ..., `"string"`). */
export const DTypeCodec = t.keyof(Object.fromEntries(DTYPES.map((d) => [d, null])) as Record<DType, null>, "a dtype");
/** Any string. */
export const Text = refined("a string", (u): u is string => typeof u === "string");

/**
 * A string that holds JSON, decoded to the value it holds (`expected JSON, got "{oops"`
 * otherwise). Piped into a codec, it decodes a JSON message in one step, each problem with its
 * path: `JsonText.pipe(StatusCodec)`.
 */
export const JsonText = new t.Type<unknown, string, unknown>(
  "JSON",
  (_: unknown): _ is unknown => true,
  (u, c) => {
    if (typeof u !== "string") return t.failure(u, c, `expected JSON text, got ${show(u)}`);
    try {
      return t.success(JSON.parse(u) as unknown);
    } catch {
      return t.failure(u, c, `expected JSON, got ${show(u)}`);
    }
  },
  (a) => JSON.stringify(a),
);

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** The rule "at most one of `a` and `b`" (each counted when given and not `null`), naming both. */
export const atMostOneOf =
  (a: string, b: string) =>
  (value: Readonly<Record<string, unknown>>): { message: string }[] => {
    const given = (k: string) => value[k] !== undefined && value[k] !== null;
    return given(a) && given(b)
      ? [{ message: `give only one of ${a} and ${b} (got ${a}: ${show(value[a])}, ${b}: ${show(value[b])})` }]
      : [];
  };

/** The rule "exactly one of `a` and `b`", naming both. */
export const exactlyOneOf =
  (a: string, b: string) =>
  (value: Readonly<Record<string, unknown>>): { message: string }[] => {
    const given = (k: string) => value[k] !== undefined && value[k] !== null;
    if (given(a) && given(b)) return atMostOneOf(a, b)(value);
    return given(a) || given(b) ? [] : [{ message: `give one of ${a} and ${b}` }];
  };

/** io-ts errors as issues, one per problem, in order, without duplicates. */
export const toIssues = (errors: t.Errors): Issue[] => {
  const out: Issue[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    const path = pathOf(e.context);
    const last = e.context[e.context.length - 1];
    const message = e.message ?? `expected ${last?.type.name ?? "a valid value"}, got ${show(e.value)}`;
    const key = `${path}\u0000${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ path, message });
  }
  return out;
};

/** Decodes `u` with `codec`; `Left` lists every problem with its path. */
export const decode = <A>(codec: t.Decoder<unknown, A>, u: unknown): E.Either<Issue[], A> => pipe(codec.decode(u), E.mapLeft(toIssues));

/** Decodes `u` with `codec`; `Left` holds one `path: message` line per problem. */
export const decodeLines = <A>(codec: t.Decoder<unknown, A>, u: unknown): E.Either<string[], A> =>
  pipe(
    decode(codec, u),
    E.mapLeft((issues) => issues.map(formatIssue)),
  );

/**
 * Decodes `u` with `codec`, or throws `makeError("<problem>; <problem>")`, each problem as
 * `path: message`: for constructors, whose options are checked as an exception-based API must.
 */
export const decodeOrThrow = <A>(codec: t.Decoder<unknown, A>, u: unknown, makeError: (problems: string) => Error): A =>
  pipe(
    decode(codec, u),
    E.getOrElse<Issue[], A>((issues) => {
      // A problem of the whole value ("give one of a and b") reads better without "(root): ".
      throw makeError(issues.map((i) => (i.path === "(root)" ? i.message : formatIssue(i))).join("; "));
    }),
  );

/**
 * Decodes the fields of `codec` found in `options` (other keys, such as a clock or a callback,
 * are the constructor's to check), or throws `ValueError("<owner>: <problem>; <problem>")`.
 * A hook's constructor uses its options codec this way, and the configuration registry uses
 * the same codec, so no option is checked or defaulted twice.
 */
export const decodeOptions = <F extends Fields>(codec: StructType<F>, options: object | undefined, owner: string): WithDefaults<F> => {
  const given = (options ?? {}) as Record<string, unknown>;
  const picked = Object.fromEntries(Object.keys(codec.fields).filter((k) => given[k] !== undefined).map((k) => [k, given[k]]));
  const decoded: Record<string, unknown> = { ...decodeOrThrow(codec, picked, (problems) => new ValueError(`${owner}: ${problems}`)) };
  for (const [k, f] of Object.entries(codec.fields)) if (decoded[k] === undefined && "value" in f) decoded[k] = f.value;
  return decoded as WithDefaults<F>;
};

/** `path: message` (with ` (line L, column C)` when known). */
export const formatIssue = (issue: Issue): string =>
  `${issue.path}: ${issue.message}${issue.line === undefined ? "" : ` (line ${issue.line}${issue.column === undefined ? "" : `, column ${issue.column}`})`}`;

/** A value as shown in messages: JSON, shortened. */
export const show = (u: unknown): string => {
  if (u === undefined) return "nothing";
  if (typeof u === "function") return "a function";
  if (typeof u === "bigint") return `${u}n`;
  try {
    const s = JSON.stringify(u);
    return s === undefined ? String(u) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
  } catch {
    return String(u);
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The path of an io-ts context: `.key` and `[index]`, `(root)` for the root. */
const pathOf = (context: t.Context): string => {
  let path = "";
  for (const entry of context.slice(1)) {
    if (entry.key === "") continue;
    path += /^\d+$/.test(entry.key) ? `[${entry.key}]` : path === "" ? entry.key : `.${entry.key}`;
  }
  return path === "" ? "(root)" : path;
};

const isPlainObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u);

const validateStruct = <F extends Fields>(type: StructType<F>, u: unknown, c: t.Context): t.Validation<StructOf<F>> => {
  if (!isPlainObject(u)) return t.failure(u, c, `expected an object (${type.name}), got ${show(u)}`);
  const errors: t.ValidationError[] = [];
  const out: Record<string, unknown> = {};
  const failed: Record<string, unknown> = {};
  const names = Object.keys(type.fields);
  errors.push(...unknownKeyErrors(u, names, type.name, c));
  for (const key of names) {
    const field = type.fields[key] as FieldSpec;
    const value = u[key];
    if (value === undefined) {
      if (!field.optional) {
        errors.push({ value, context: [...c, { key, type: field.codec, actual: value }], message: `is required (${field.codec.name})` });
      }
      continue;
    }
    const r = field.codec.validate(value, [...c, { key, type: field.codec, actual: value }]);
    if (r._tag === "Left") {
      errors.push(...r.left);
      failed[key] = value;
    } else out[key] = r.right;
  }
  // Checks also run when some fields failed, so that every problem is reported at once; a
  // failed field keeps its raw value there (it was given), so no check reports it as missing.
  const value = (errors.length > 0 ? { ...out, ...failed } : out) as StructOf<F>;
  for (const check of type.checks) {
    for (const p of check(value)) {
      const context = p.key === undefined ? c : [...c, { key: p.key, type: t.unknown, actual: (value as Record<string, unknown>)[p.key] }];
      errors.push({ value, context, message: p.message });
    }
  }
  return errors.length > 0 ? t.failures(errors) : t.success(value);
};

/** One error per key of `u` not in `names`, with a "did you mean" for a likely typo. */
const unknownKeyErrors = (u: Record<string, unknown>, names: readonly string[], typeName: string, c: t.Context): t.ValidationError[] =>
  // Own keys against a list: `k in fields` would accept `constructor`, `toString`, `__proto__`.
  Object.keys(u)
    .filter((key) => !names.includes(key))
    .map((key) => {
      const hint = closest(key, names);
      return {
        value: u[key],
        context: [...c, { key, type: t.never, actual: u[key] }],
        message: `unknown field "${key}"${hint === undefined ? "" : ` (did you mean "${hint}"?)`}; ${typeName} accepts ${names.join(", ")}`,
      };
    });

/** The name within edit distance 2 of `key` (case-insensitive), if one is: the "did you mean". */
export const closest = (key: string, names: readonly string[]): string | undefined => {
  let best: string | undefined;
  let bestD = 3;
  for (const n of names) {
    const d = distance(key.toLowerCase(), n.toLowerCase());
    if (d < bestD) {
      best = n;
      bestD = d;
    }
  }
  return best;
};

const distance = (a: string, b: string): number => {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j] as number;
      row[j] = Math.min((row[j] as number) + 1, (row[j - 1] as number) + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length] as number;
};
