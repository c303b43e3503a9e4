/**
 * The cluster settings flags of `launch -- <command>` (`--backend`, `--etcd-endpoints`,
 * `--token-file`, …): each sets one key of the `cluster:` section. Apart from `launch`, so that
 * the command line declares them without loading the cluster's modules.
 *
 * @module
 */

import { isAbsolute, resolve } from "node:path";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/**
 * The `cluster:` settings of `launch -- <command>` as given on the command line, each flag's text
 * as typed (the `cluster:` section's codec judges them, naming the flag).
 */
export interface ClusterFlags {
  readonly backend?: string;
  /** Comma-separated URLs. */
  readonly etcdEndpoints?: string;
  readonly etcdPrefix?: string;
  readonly tokenFile?: string;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
  readonly tlsCa?: string;
  readonly heartbeatTimeout?: string;
  readonly collectiveTimeout?: string;
  /** A JSON or YAML file holding the section's keys at top level; the flags override its keys. */
  readonly clusterConfig?: string;
}

/** A flag that sets one key of the `cluster:` section. */
export interface ClusterFlag {
  /** As commander declares it (`--backend <name>`). */
  readonly flags: string;
  /** Its option name in {@link ClusterFlags}. */
  readonly name: Exclude<keyof ClusterFlags, "clusterConfig">;
  /** The key it sets, as a codec issue names it (`tls.certFile`). */
  readonly key: string;
  readonly help: string;
  /** The key's value from the flag's text (relative paths against `cwd`). */
  readonly value: (text: string, cwd: string) => unknown;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A flag's text as a number when it reads as one; otherwise as typed, for the codec to name. */
const numberOr = (text: string): unknown => {
  const n = Number(text);
  return text.trim() !== "" && Number.isFinite(n) ? n : text;
};

/** A path against `cwd`; an empty one as typed, for the codec to refuse. */
const pathFrom = (text: string, cwd: string): string => (text === "" || isAbsolute(text) ? text : resolve(cwd, text));

/** The settings flags of `launch -- <command>`, one per key of the `cluster:` section they set. */
export const CLUSTER_FLAGS: readonly ClusterFlag[] = [
  { flags: "--backend <name>", name: "backend", key: "backend", help: "where the coordination state lives: a registered backend's name: embedded (the default, in the chief), etcd, or one a plugin registers (memory, in one process, is for programs that start every task themselves)", value: (s) => s },
  {
    flags: "--etcd-endpoints <urls>",
    name: "etcdEndpoints",
    key: "etcdEndpoints",
    help: "the etcd cluster's client URLs, comma-separated (--backend etcd only)",
    value: (s) => s.split(",").map((u) => u.trim()).filter((u) => u !== ""),
  },
  {
    flags: "--etcd-prefix <prefix>",
    name: "etcdPrefix",
    key: "etcdPrefix",
    help: "the job's etcd key prefix, ending with / (default: monitored-session/ and a hash of the cluster's addresses; --backend etcd only)",
    value: (s) => s,
  },
  { flags: "--token-file <path>", name: "tokenFile", key: "tokenFile", help: "a file whose first line is the shared cluster token", value: pathFrom },
  { flags: "--tls-cert <path>", name: "tlsCert", key: "tls.certFile", help: "TLS: each task's certificate chain (PEM); with --tls-key", value: pathFrom },
  { flags: "--tls-key <path>", name: "tlsKey", key: "tls.keyFile", help: "TLS: the certificate's private key (PEM)", value: pathFrom },
  { flags: "--tls-ca <path>", name: "tlsCa", key: "tls.caFile", help: "TLS: the CA of every task's certificate (mutual TLS)", value: pathFrom },
  {
    flags: "--heartbeat-timeout <secs>",
    name: "heartbeatTimeout",
    key: "timeouts.heartbeatTimeoutSecs",
    help: "a task silent this long is declared failed (default 10)",
    value: numberOr,
  },
  {
    flags: "--collective-timeout <secs>",
    name: "collectiveTimeout",
    key: "collectiveTimeoutSecs",
    help: "the deadline of every collective (default 60)",
    value: numberOr,
  },
];
