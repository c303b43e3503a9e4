/**
 * The `grpc://` session target. A `master` of `grpc://host:port` (the task's own server's
 * `target`) means: the graph runs in this process; the chief publishes its model through its
 * server's `ModelService` (a {@link ModelPublisher}); a worker waits until the chief is ready
 * and starts from its values, bit for bit, then trains its own replica. The core does not know
 * gRPC: pass the registry this module builds as `sessionTargets`.
 *
 * @example
 * ```ts
 * import { monitoredTrainingSession } from "monitored-session";
 * import { clusterSessionTargets } from "monitored-session/cluster";
 *
 * const cluster = { chief: ["localhost:2222"], worker: ["localhost:2223"] };
 * // On worker 0, whose own server serves grpc://localhost:2223:
 * const session = await monitoredTrainingSession({
 *   master: "grpc://localhost:2223",
 *   isChief: false,
 *   sessionTargets: clusterSessionTargets({ cluster, token: process.env["MS_CLUSTER_TOKEN"] }),
 *   maxWaitSecs: 600,
 * });
 * ```
 *
 * @module
 */

import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { decodeTensor, tensorBytes } from "../checkpoint/BundleFormat.js";
import type { ChiefModel, ChiefModelState } from "../session/ChiefModel.js";
import { AbortedError, DataLossError, DeadlineExceededError, ErrorCode, OpError, UnavailableError, ValueError } from "../errors.js";
import { defaultSessionTargets, type SessionTargetRegistry, type SessionTargetResolver } from "../pipeline/SessionTarget.js";
import { DTYPES, numElements, type DType, type TensorValue } from "../session/Tensor.js";
import { crc32c } from "@node-rs/crc32";
import { callError, clusterTransport, type ClusterClientOptions } from "./clusterClient.js";
import { ClusterSpec, type ClusterSpecLike } from "./ClusterSpec.js";
import type { ModelPublisher } from "./ModelPublisher.js";
import { ModelService, type GetVariablesResponse, type SnapshotHeader, type VariableHeader } from "./proto/gen/monitored_session/v1/model_pb.js";
import { parseAddress } from "./TfConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link clusterSessionTargets}: where the chief is, how to call it, and (on the chief) what it publishes. */
export interface GrpcSessionTargetOptions extends ClusterClientOptions {
  /** The chief's server, `grpc://host:port`. Default: the cluster's chief task (`chief` 0, else `worker` 0), else the master itself. */
  readonly chief?: string | undefined;
  /** The cluster (TF_CONFIG's), to find the chief in. */
  readonly cluster?: ClusterSpecLike | undefined;
  /** On the chief: its model publisher, registered on its server; the chief's session runs it as a hook. */
  readonly publisher?: ModelPublisher | undefined;
  /** The deadline of one snapshot download, in ms (default 600 000: a large model over a slow link). */
  readonly snapshotTimeoutMs?: number | undefined;
  /** The largest data chunk to ask for, in bytes (default: the chief's, 1 MiB). */
  readonly maxChunkBytes?: number | undefined;
  /** Call the chief through this transport instead of one built from the address, token and TLS (a proxy, a test's in-memory router). */
  readonly transport?: Transport | undefined;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The resolver of `grpc://host:port` targets. @throws ValueError (at `resolve`) for a master that is not `grpc://host:port`. */
export const grpcSessionTargetResolver = (options: GrpcSessionTargetOptions = {}): SessionTargetResolver => {
  const fromCluster = options.cluster === undefined ? undefined : chiefTargetOf(new ClusterSpec(options.cluster));
  const publisher = options.publisher;
  return {
    scheme: "grpc",
    resolve: (master) => {
      checkTarget(master, "master");
      const chief = options.chief ?? fromCluster ?? master;
      if (options.chief !== undefined) checkTarget(options.chief, "chief");
      return {
        master,
        sessionFactory: (local) => local,
        chiefModel: new GrpcChiefModel(chief, options),
        chiefHooks: publisher === undefined ? [] : [publisher],
      };
    },
  };
};

/** The default registry plus `grpc://`: pass it as `sessionTargets` (to `monitoredTrainingSession` or `prepareOrWaitForSession`). */
export const clusterSessionTargets = (options: GrpcSessionTargetOptions = {}): SessionTargetRegistry =>
  defaultSessionTargets.with(grpcSessionTargetResolver(options));

/** The chief's model over gRPC: readiness, then one streamed snapshot, checked piece by piece. */
export class GrpcChiefModel implements ChiefModel {
  #client: Client<typeof ModelService> | undefined;
  readonly #options: GrpcSessionTargetOptions;

  /** @throws ValueError when `address` is not `grpc://host:port`. */
  constructor(
    readonly address: string,
    options: GrpcSessionTargetOptions = {},
  ) {
    checkTarget(address, "the chief's address");
    this.#options = options;
  }

  /**
   * Asks the chief once. Unreachable, restarting (Unavailable, Aborted, a call past its
   * deadline) or not ready: `{ ready: false }`. Anything else is thrown: UnauthenticatedError
   * for a wrong token, DataLossError for a snapshot whose bytes do not match their checksum.
   */
  async pull(): Promise<ChiefModelState> {
    this.#client ??= createClient(ModelService, this.#transport());
    const client = this.#client;
    let readiness;
    try {
      readiness = await client.getReadiness({});
    } catch (e) {
      return this.#notReached(e);
    }
    if (!readiness.ready) return { ready: false, reason: `not ready: it ${readiness.reason}` };
    let snapshot: Snapshot;
    try {
      snapshot = await readSnapshot(
        client.getVariables({ maxChunkBytes: this.#options.maxChunkBytes ?? 0 }, { timeoutMs: this.#options.snapshotTimeoutMs ?? 600_000 }),
        this.address,
      );
    } catch (e) {
      if (e instanceof DataLossError) throw e;
      return this.#notReached(e);
    }
    const { header, values } = snapshot;
    return {
      ready: true,
      values,
      globalStep: Number(header.globalStep),
      origin: `${readiness.taskName} at ${this.address} (incarnation ${header.incarnation.toString(16)}, session ${header.generation}, global step ${header.globalStep}, ${values.size} variables, ${header.totalBytes} bytes)`,
    };
  }

  #transport(): Transport {
    const { token, tls, timeoutMs, transport } = this.#options;
    if (transport !== undefined) return transport;
    return clusterTransport(this.address, { token, tls, timeoutMs });
  }

  #notReached(e: unknown): ChiefModelState {
    const err = e instanceof UnavailableError ? e : callError(e, this.address);
    // A stream the chief's end reset (CANCEL: its process died during the call) is a chief not reached either.
    if (err instanceof UnavailableError || err instanceof AbortedError || err instanceof DeadlineExceededError || (err instanceof OpError && err.code === ErrorCode.CANCELLED)) {
      return { ready: false, reason: `not reachable: ${err.message.replace(`${this.address}: `, "")}` };
    }
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

interface Snapshot {
  readonly header: SnapshotHeader;
  readonly values: Map<string, TensorValue>;
}

/** The `grpc://` address of the cluster's chief: `chief` 0, else `worker` 0. */
const chiefTargetOf = (cluster: ClusterSpec): string => {
  for (const job of ["chief", "worker"]) {
    if (cluster.jobs.includes(job) && cluster.taskIndices(job).includes(0)) return `grpc://${cluster.taskAddress(job, 0)}`;
  }
  throw new ValueError(`the cluster has no chief: it needs a "chief" job or task 0 of a "worker" job (jobs: ${cluster.jobs.join(", ") || "none"})`);
};

const checkTarget = (target: string, what: string): void => {
  if (!/^grpc:\/\//i.test(target) || parseAddress(target.slice("grpc://".length)) === undefined) {
    throw new ValueError(`${what} "${target}" is not a gRPC target: write it as grpc://host:port`);
  }
};

/**
 * Reads one snapshot stream: a header, each variable's description and bytes, a trailer. A
 * stream cut short (the chief died mid-transfer) is an UnavailableError, so the worker waits and
 * asks again; bytes that contradict their description or checksum are a DataLossError.
 */
const readSnapshot = async (stream: AsyncIterable<GetVariablesResponse>, address: string): Promise<Snapshot> => {
  const bad = (why: string): DataLossError => new DataLossError(`the snapshot from the chief at ${address} is corrupt: ${why}`);
  let header: SnapshotHeader | undefined;
  let current: { readonly v: VariableHeader; readonly buf: Buffer; at: number } | undefined;
  const values = new Map<string, TensorValue>();
  let totalBytes = 0n;
  const finish = (): void => {
    if (current === undefined) return;
    const { v, buf, at } = current;
    if (at !== buf.byteLength) throw new UnavailableError(`the snapshot stream from ${address} ended inside variable "${v.name}"`);
    if (crc32c(buf) !== v.crc32c) throw bad(`variable "${v.name}" does not match its CRC-32C`);
    values.set(v.name, decodeVariable(v, buf, bad));
    current = undefined;
  };
  let done: Snapshot | undefined;
  // Read to the end of the stream (not just the trailer): a call left half-read keeps its connection busy.
  for await (const msg of stream) {
    if (done !== undefined) throw bad("messages after the trailer");
    const part = msg.part;
    if (part.case !== "header" && header === undefined) throw bad(`it starts with ${part.case ?? "an empty message"}, not a header`);
    switch (part.case) {
      case "header":
        if (header !== undefined) throw bad("a second header");
        header = part.value;
        break;
      case "variable": {
        finish();
        const v = part.value;
        if (values.has(v.name)) throw bad(`variable "${v.name}" is sent twice`);
        totalBytes += v.byteLength;
        if (totalBytes > (header as SnapshotHeader).totalBytes) throw bad(`variable "${v.name}" goes past the ${(header as SnapshotHeader).totalBytes} bytes the header announced`);
        current = { v, buf: Buffer.alloc(Number(v.byteLength)), at: 0 };
        break;
      }
      case "data": {
        if (current === undefined) throw bad("data before any variable");
        if (current.at + part.value.byteLength > current.buf.byteLength) throw bad(`variable "${current.v.name}" has more than its ${current.v.byteLength} bytes`);
        current.buf.set(part.value, current.at);
        current.at += part.value.byteLength;
        break;
      }
      case "trailer": {
        finish();
        const h = header as SnapshotHeader;
        const t = part.value;
        if (t.variableCount !== h.variableCount || values.size !== h.variableCount || t.totalBytes !== h.totalBytes || totalBytes !== h.totalBytes) {
          throw bad(`header announced ${h.variableCount} variables and ${h.totalBytes} bytes; got ${values.size} and ${totalBytes}`);
        }
        done = { header: h, values };
        break;
      }
      default:
        throw bad("a message with no part (a newer chief?)");
    }
  }
  if (done !== undefined) return done;
  if (current !== undefined && current.at !== current.buf.byteLength) {
    throw new UnavailableError(`the snapshot stream from ${address} ended inside variable "${current.v.name}"`);
  }
  throw new UnavailableError(`the snapshot stream from ${address} ended before its trailer`);
};

const decodeVariable = (v: VariableHeader, buf: Buffer, bad: (why: string) => DataLossError): TensorValue => {
  const where = `variable "${v.name}"`;
  if (!(DTYPES as readonly string[]).includes(v.dtype)) throw bad(`${where} has unknown dtype "${v.dtype}"`);
  const shape = v.shape.map(Number);
  if (shape.some((d) => !Number.isSafeInteger(d) || d < 0)) throw bad(`${where} has invalid shape [${v.shape.join(", ")}]`);
  let t: TensorValue;
  try {
    t = decodeTensor(buf, { name: v.name, dtype: v.dtype as DType, shape, offset: 0, length: buf.byteLength, crc32c: v.crc32c }, "snapshot");
    // The bytes must be exactly the tensor's: encoding it again gives as many.
    if (tensorBytes(v.name, t).byteLength !== buf.byteLength) throw new Error(`${buf.byteLength} bytes for ${numElements(shape)} ${v.dtype} elements`);
  } catch (e) {
    throw bad(`${where}: ${e instanceof Error ? e.message : String(e)}`);
  }
  return t;
};
