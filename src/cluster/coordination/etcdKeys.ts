/**
 * The etcd backend's key layout under a cluster's prefix (see EtcdCoordinationClient.ts): the
 * `generation` counter, each launch's `g/<n>/...` keys, the `final` report; and the codecs of
 * what is stored there (a generation number, a recorded error, a task name as a key segment).
 *
 * @module
 */

import type { IKeyValue } from "etcd3";
import { DataLossError, type OpError } from "../../errors.js";
import { decodeStatusJson, fromStatus } from "./status.js";

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
export const parseGeneration = (kv: IKeyValue): number => {
  const text = kv.value.toString();
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new DataLossError(
      `etcd key ${kv.key.toString()}: expected a positive integer generation, got ${JSON.stringify(text.slice(0, 80))}; delete the key to start from 1`,
    );
  }
  return n;
};

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
