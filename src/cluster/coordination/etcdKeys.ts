/**
 * The etcd backend's key layout under a cluster's prefix (see EtcdCoordinationClient.ts): the
 * `generation` counter, each launch's `g/<n>/...` keys, the `final` report; and the codecs of
 * what is stored there (a generation number, a recorded error, the final report's generation,
 * a task name as a key segment).
 *
 * @module
 */

import type { IKeyValue } from "etcd3";
import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import { decode, decodeOrThrow, JsonText } from "../../codec.js";
import { DataLossError, type OpError } from "../../errors.js";
import { decodeStatusJson, fromStatus } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The generation counter's text: a positive integer, as `String(n)` wrote it. */
const GenerationText = new t.Type<number, string, unknown>(
  "a positive integer generation",
  (u): u is number => typeof u === "number" && Number.isSafeInteger(u) && u >= 1,
  (u, c) => {
    const n = typeof u === "string" ? Number(u) : Number.NaN;
    return Number.isSafeInteger(n) && n >= 1
      ? t.success(n)
      : t.failure(u, c, `expected a positive integer generation, got ${JSON.stringify(typeof u === "string" ? u.slice(0, 80) : u)}`);
  },
  String,
);

/** The `final` report: a status (see status.ts) and the generation it was sent from. */
const FinalReportGeneration = JsonText.pipe(t.type({ generation: t.number }), "a final report");

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The keys of one cluster, under its prefix. */
export class EtcdKeys {
  /** The launch counter, incremented by the chief at `connect()` (kept forever). */
  readonly generation: string;
  /** The prefix of every launch's keys. */
  readonly generations: string;
  /** A task's final report (see the client's module doc). */
  readonly final: string;

  constructor(readonly root: string) {
    this.generation = `${root}generation`;
    this.generations = `${root}g/`;
    this.final = `${root}final`;
  }

  /** The key `rest` of launch `gen`. */
  inGeneration(gen: number, rest: string): string {
    return `${this.root}g/${gen}/${rest}`;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The generation counter's value; anything but a positive integer is `DataLossError`. */
export const parseGeneration = (kv: IKeyValue): number =>
  decodeOrThrow(GenerationText, kv.value.toString(), (problem) => new DataLossError(`etcd key ${kv.key.toString()}: ${problem}; delete the key to start from 1`));

/** Whether the generation counter's text (`null`: no counter) names generation `gen`. */
export const isGeneration = (text: string | null, gen: number): boolean =>
  pipe(
    GenerationText.decode(text),
    E.exists((n) => n === gen),
  );

/** The generation a `final` report was sent from; `undefined` for a record that names none. */
export const finalReportGeneration = (kv: IKeyValue): number | undefined =>
  pipe(
    decode(FinalReportGeneration, kv.value.toString()),
    E.match(
      () => undefined,
      (r) => r.generation,
    ),
  );

/** The cluster's error as recorded in etcd (a malformed record is itself the error). */
export const storedError = (kv: IKeyValue): OpError => {
  try {
    return fromStatus(decodeStatusJson(kv.value.toString(), `etcd key ${kv.key.toString()}`));
  } catch (e) {
    return e as OpError;
  }
};

/** A task name or barrier id as one key segment (task names hold "/"). */
export const enc = (s: string): string => encodeURIComponent(s);
export const dec = (s: string): string => decodeURIComponent(s);
