/**
 * The two coordination backends a process test of `launch` or `run` runs on: `embedded` (the
 * chief hosts the service) and `etcd` (skipped, with one message naming the package, without the
 * binary). Each describe block of a backend calls {@link CoordinationBackend.serve} first: it
 * starts and stops the etcd server around the block. `lines()` are the settings under a
 * `cluster:` key (none for `embedded`), with a prefix of their own each call, so that no two
 * runs share etcd keys; `cluster()` is the whole `cluster:` block.
 */
import { afterAll, beforeAll } from "vitest";

import { etcdBinary, EtcdProcess } from "../cluster/coordination/etcdHarness.js";

/** One backend of {@link coordinationBackends}. */
export interface CoordinationBackend {
  readonly name: "embedded" | "etcd";
  /** Whether its tests are skipped (etcd without its binary). */
  readonly skip: boolean;
  /** The settings under `cluster:`, indented by two spaces (empty for `embedded`). */
  lines(): string;
  /** The `cluster:` block selecting the backend (empty for `embedded`). */
  cluster(): string;
  /** The same settings as `launch -- <command>`'s flags (none for `embedded`). */
  flags(): string[];
  /** Starts what the backend needs before the enclosing block's tests and stops it after them. */
  serve(): void;
}

/** The backends of a test file; `what` names the file in the skip message, `prefix` its etcd keys. */
export const coordinationBackends = (what: string, prefix: string): readonly CoordinationBackend[] => {
  if (etcdBinary === undefined) console.warn(`${what}: no etcd binary (apt-get install etcd-server): the etcd half of these tests is skipped`);
  let etcd: EtcdProcess | undefined;
  const served = (): EtcdProcess => {
    if (etcd === undefined) throw new Error("the etcd backend's serve() was not called in this describe block");
    return etcd;
  };
  const keyPrefix = (): string => `${prefix}-${Math.random().toString(16).slice(2)}/`;
  const etcdLines = (): string => `  backend: etcd\n  etcdEndpoints: [${served().endpoint}]\n  etcdPrefix: ${keyPrefix()}\n`;
  return [
    { name: "embedded", skip: false, lines: () => "", cluster: () => "", flags: () => [], serve: () => undefined },
    {
      name: "etcd",
      skip: etcdBinary === undefined,
      lines: etcdLines,
      cluster: () => `cluster:\n${etcdLines()}`,
      flags: () => ["--backend", "etcd", "--etcd-endpoints", served().endpoint, "--etcd-prefix", keyPrefix()],
      serve: () => {
        beforeAll(async () => {
          etcd = await EtcdProcess.start();
        }, 60_000);
        afterAll(async () => {
          await etcd?.stop();
          etcd = undefined;
        });
      },
    },
  ];
};
