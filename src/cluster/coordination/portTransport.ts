/**
 * The embedded service's API over a `MessagePort`: how a heartbeat thread (or a task on another
 * thread) reaches a service hosted elsewhere in the process. One request message per call,
 * `{ id, method, request }`; one reply, `{ id, value }` or `{ id, status }`. A gRPC server hosts
 * the same API with one RPC per method and the same `Status` mapping.
 *
 * @module
 */

import { MessageChannel, type MessagePort } from "node:worker_threads";
import { type OpError, UnavailableError } from "../../errors.js";
import type { CoordinationServiceApi } from "./EmbeddedCoordinationService.js";
import { decodeFailureHeader, EMBEDDED_SERVICE_GONE, FAILURE_HEADER, fromStatus, type Status, toStatus } from "./status.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A request on the port. `openPort` asks for a new port onto the same service. */
export interface PortRequest {
  readonly id: number;
  readonly method: keyof CoordinationServiceApi | "openPort";
  readonly request?: unknown;
}

/** A reply on the port. */
export type PortReply =
  | { readonly id: number; readonly value: unknown }
  | { readonly id: number; readonly status: Status & { readonly failureHeader?: string } };

/** A {@link CoordinationServiceApi} reached through a port, and a way to open more ports. */
export interface PortTransport {
  readonly api: CoordinationServiceApi;
  /** A new port onto the same service (transferable to another thread). */
  openPort(): Promise<MessagePort>;
  /** Closes this port. Pending calls fail with `UnavailableError`. */
  close(): void;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Serves `api` on `port` until the port closes. */
export const servePort = (api: CoordinationServiceApi, port: MessagePort): void => {
  port.on("message", (msg: PortRequest) => {
    if (msg.method === "openPort") {
      const { port1, port2 } = new MessageChannel();
      servePort(api, port1);
      port.postMessage({ id: msg.id, value: port2 } satisfies PortReply, [port2]);
      return;
    }
    const method = api[msg.method] as (req: unknown) => Promise<unknown>;
    method.call(api, msg.request).then(
      (value) => port.postMessage({ id: msg.id, value } satisfies PortReply),
      (error: unknown) => port.postMessage({ id: msg.id, status: toStatus(error) } satisfies PortReply),
    );
  });
};

/** A new port onto `api`, served on the calling thread. */
export const openServicePort = (api: CoordinationServiceApi): MessagePort => {
  const { port1, port2 } = new MessageChannel();
  servePort(api, port1);
  return port2;
};

/** The client side of {@link servePort}. */
export const portTransport = (port: MessagePort): PortTransport => {
  let nextId = 0;
  let closed = false;
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  const lost = (): UnavailableError =>
    new UnavailableError("the coordination service's port closed (its host stopped)", { failure: EMBEDDED_SERVICE_GONE });
  port.on("message", (msg: PortReply) => {
    const p = pending.get(msg.id);
    if (p === undefined) return;
    pending.delete(msg.id);
    if ("status" in msg) p.reject(errorOf(msg.status));
    else p.resolve(msg.value);
  });
  port.on("close", () => {
    closed = true;
    for (const p of pending.values()) p.reject(lost());
    pending.clear();
  });
  const call = (method: PortRequest["method"], request?: unknown): Promise<unknown> => {
    if (closed) return Promise.reject(lost());
    const id = nextId++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      port.postMessage({ id, method, request } satisfies PortRequest);
    });
  };
  const method =
    <K extends keyof CoordinationServiceApi>(name: K) =>
    (req: Parameters<CoordinationServiceApi[K]>[0]) =>
      call(name, req) as ReturnType<CoordinationServiceApi[K]>;
  return {
    api: {
      register: method("register"),
      heartbeat: method("heartbeat"),
      insert: method("insert"),
      get: method("get"),
      tryGet: method("tryGet"),
      delete: method("delete"),
      listDir: method("listDir"),
      barrier: method("barrier"),
      reportError: method("reportError"),
      shutdown: method("shutdown"),
    },
    openPort: () => call("openPort") as Promise<MessagePort>,
    close: () => {
      port.close();
    },
  };
};

/**
 * A reply's status with the failure a gRPC answer carried in its header (the heartbeat channel
 * thread passes the header's text on), decoded with its codec; a malformed one fails as DataLossError.
 */
export const errorOf = (status: Status & { readonly failureHeader?: string }): OpError => {
  const { failureHeader, ...rest } = status;
  if (failureHeader === undefined) return fromStatus(rest);
  try {
    return fromStatus({ ...rest, failure: decodeFailureHeader(failureHeader, `the coordination service's ${FAILURE_HEADER}`) });
  } catch (e) {
    // decodeFailureHeader's DataLossError
    return e as OpError;
  }
};
