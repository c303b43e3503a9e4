/**
 * Calling another task's {@link Server}: a gRPC transport (connect-node, HTTP/2) that carries the
 * cluster token and speaks TLS when the cluster does, and `getServerStatus`, which asks a server
 * who it is. Every call has a deadline.
 *
 * @example
 * ```ts
 * import { getServerStatus } from "monitored-session/cluster";
 *
 * const status = await getServerStatus("grpc://localhost:2222", { timeoutMs: 5_000 });
 * console.log(status.taskName, status.incarnation);
 * ```
 *
 * @module
 */

import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AbortedError, DeadlineExceededError, InvalidArgumentError, OpError, type ErrorCode, UnauthenticatedError, UnavailableError } from "../errors.js";
import { StatusService, type GetStatusResponse } from "./proto/gen/monitored_session/v1/status_pb.js";
import { bearer, loadTlsCredentials, readPem, TOKEN_HEADER, type TlsFiles } from "./security.js";
import { parseAddress } from "./TfConfig.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** How to reach the cluster's servers. */
export interface ClusterClientOptions {
  /** The cluster token, sent on every call. */
  readonly token?: string | undefined;
  /** TLS: `caFile` is the CA the servers' certificates chain to; `certFile`/`keyFile` are this task's (for mutual TLS). */
  readonly tls?: Partial<TlsFiles> | undefined;
  /** The deadline of each call, in ms (default 10 000). */
  readonly timeoutMs?: number | undefined;
}

/** What a gRPC transport to a cluster server needs, as plain data (it can be sent to a worker thread). */
export interface ClusterTransportSettings {
  readonly baseUrl: string;
  /** Headers sent on every call (the cluster token). */
  readonly headers: readonly (readonly [string, string])[];
  readonly defaultTimeoutMs: number;
  /** TLS material for `http2.connect`. */
  readonly nodeOptions?: { ca?: Buffer; cert?: Buffer; key?: Buffer };
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The settings of a transport to `target` (`grpc://host:port`). @throws TypeError for a bad target; InvalidArgumentError for unreadable TLS files. */
export const clusterTransportSettings = (target: string, options: ClusterClientOptions = {}): ClusterTransportSettings => {
  const address = target.replace(/^grpc:\/\//, "");
  if (parseAddress(address) === undefined) throw new TypeError(`target "${target}" is not grpc://host:port`);
  const tls = options.tls;
  return {
    baseUrl: `${tls === undefined ? "http" : "https"}://${address}`,
    headers: options.token === undefined ? [] : [[TOKEN_HEADER, bearer(options.token)]],
    defaultTimeoutMs: options.timeoutMs ?? 10_000,
    ...(tls === undefined ? {} : { nodeOptions: tlsClientOptions(tls) }),
  };
};

/** A gRPC transport to `target` (`grpc://host:port`). @throws InvalidArgumentError for a bad target or unreadable TLS files. */
export const clusterTransport = (target: string, options: ClusterClientOptions = {}): Transport => {
  const { baseUrl, headers, defaultTimeoutMs, nodeOptions } = clusterTransportSettings(target, options);
  const interceptors: Interceptor[] =
    headers.length === 0
      ? []
      : [
          (next) => (req) => {
            for (const [name, value] of headers) req.header.set(name, value);
            return next(req);
          },
        ];
  return createGrpcTransport({ baseUrl, interceptors, defaultTimeoutMs, ...(nodeOptions === undefined ? {} : { nodeOptions }) });
};

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Asks the server at `target` for its task name, incarnation and version.
 * @throws UnauthenticatedError (wrong or missing token), UnavailableError (nobody serves there),
 *   DeadlineExceededError (no answer within `timeoutMs`), or another OpError with the call's code.
 */
export const getServerStatus = async (target: string, options: ClusterClientOptions = {}): Promise<GetStatusResponse> => {
  const client = createClient(StatusService, clusterTransport(target, options));
  try {
    return await client.getStatus({});
  } catch (e) {
    throw callError(e, target);
  }
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const tlsClientOptions = (tls: Partial<TlsFiles>): { ca?: Buffer; cert?: Buffer; key?: Buffer } => {
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    throw new InvalidArgumentError("TLS: give both certFile and keyFile (a client certificate), or neither");
  }
  const ca = tls.caFile === undefined ? undefined : readPem(tls.caFile, "TLS CA file (caFile)");
  const pair = tls.certFile === undefined || tls.keyFile === undefined ? undefined : loadTlsCredentials({ certFile: tls.certFile, keyFile: tls.keyFile });
  return { ...(ca === undefined ? {} : { ca }), ...(pair === undefined ? {} : { cert: pair.cert, key: pair.key }) };
};

/** A failed call as the project's error: the class of its gRPC code, the target in the message. */
export const callError = (e: unknown, target: string): Error => {
  const err = ConnectError.from(e);
  const nodeCode = (err.cause as NodeJS.ErrnoException | undefined)?.code;
  if (typeof nodeCode === "string" && /^ERR_(SSL|TLS)_/.test(nodeCode)) {
    // gRPC reports a failed TLS handshake as UNAVAILABLE; connect-node says INTERNAL.
    return new UnavailableError(`${target}: TLS handshake failed (${nodeCode}); check the CA, and the client certificate when the servers require one`, { cause: e });
  }
  const message = `${target}: ${err.rawMessage}`;
  switch (err.code) {
    case Code.Unauthenticated:
      return new UnauthenticatedError(message, { cause: e });
    case Code.Unavailable:
      return new UnavailableError(message, { cause: e });
    case Code.DeadlineExceeded:
      return new DeadlineExceededError(message, { cause: e });
    case Code.Aborted:
      return new AbortedError(message, { cause: e });
    default:
      return new OpError(message, err.code as ErrorCode, { cause: e });
  }
};
