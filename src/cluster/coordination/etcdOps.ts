/**
 * The etcd primitives the etcd coordination backend is built on: insert-if-absent (a
 * transaction on the key's create revision), and a wait on a key or prefix (a read, then a
 * watch from the next revision, re-reading on every change until a test passes); and the
 * context they and the generation and barrier protocols run in.
 *
 * @module
 */

import type { Etcd3, IKeyValue, Watcher } from "etcd3";
import type { Clock } from "../../time/Clock.js";
import type { OpError } from "../../errors.js";
import type { CoordinationTimeouts } from "./CoordinationConfig.js";
import type { EtcdKeys } from "./etcdKeys.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** One task's view of the cluster in etcd: the client, its keys, and who it is. */
export interface EtcdTaskContext {
  readonly etcd: Etcd3;
  readonly keys: EtcdKeys;
  readonly clock: Clock;
  /** Aborted when the client closes: every wait still pending ends with its reason. */
  readonly closing: AbortSignal;
  readonly task: string;
  readonly tasks: readonly string[];
  readonly incarnation: string;
  readonly timeouts: CoordinationTimeouts;
  /** The etcd endpoints, for error messages. */
  readonly hosts: readonly string[];
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Writes `key` unless it exists; resolves whether it wrote it. */
export const insertIfAbsent = async (etcd: Etcd3, key: string, value: string): Promise<boolean> => {
  const r = await etcd.if(key, "Create", "==", 0).then(etcd.put(key).value(value)).commit();
  return r.succeeded;
};

/**
 * Reads `key` (or the prefix) and re-reads on every change until `test` gives a value, or
 * fails with `onTimeout()` after `timeoutMs`, or with the signal's reason when it (or the
 * client's `closing`) aborts.
 */
export const waitUntil = <T>(
  context: Pick<EtcdTaskContext, "etcd" | "clock" | "closing">,
  key: string,
  isPrefix: boolean,
  timeoutMs: number,
  test: (kvs: IKeyValue[], revision: string) => T | undefined,
  onTimeout: () => OpError,
  given?: AbortSignal,
): Promise<T> => {
  const { etcd, clock } = context;
  const signal = given === undefined ? context.closing : AbortSignal.any([given, context.closing]);
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    let watcher: Watcher | undefined;
    let done = false;
    const onAbort = (): void => finish(() => reject(signal?.reason));
    const finish = (f: () => void): void => {
      if (done) return;
      done = true;
      timer.cancel();
      signal?.removeEventListener("abort", onAbort);
      void watcher?.cancel().catch(() => {});
      f();
    };
    const timer = clock.setTimer(Math.max(0, timeoutMs), () => finish(() => reject(onTimeout())));
    signal?.addEventListener("abort", onAbort, { once: true });
    const read = async (): Promise<string> => {
      const r = isPrefix ? await etcd.getAll().prefix(key).exec() : await etcd.get(key).exec();
      const v = test(r.kvs, r.header.revision);
      if (v !== undefined) finish(() => resolve(v));
      return r.header.revision;
    };
    const onChange = (): void => {
      read().catch((e: unknown) => finish(() => reject(e)));
    };
    read()
      .then(async (revision) => {
        if (done) return;
        const b = etcd.watch();
        const w = await (isPrefix ? b.prefix(key) : b.key(key)).startRevision(String(BigInt(revision) + 1n)).create();
        if (done) {
          void w.cancel().catch(() => {});
          return;
        }
        watcher = w;
        w.on("error", () => {});
        w.on("put", onChange);
        w.on("delete", onChange);
        onChange();
      })
      .catch((e: unknown) => finish(() => reject(e)));
  });
};
