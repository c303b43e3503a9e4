/**
 * Where a worker's model comes from when the chief runs in another process. With a `grpc://`
 * master the graph runs locally in every task; what crosses processes is the chief's readiness
 * and its variables' values. A {@link ChiefModel} asks the chief once; `SessionManager`'s
 * `waitForSession` asks again every `recoveryWaitSecs` until the chief is ready or `maxWaitSecs`
 * ran out, then restores the values into the worker's fresh session.
 *
 * The core knows only this interface; `monitored-session/cluster` implements it over gRPC.
 *
 * @module
 */

import type { TensorValue } from "./Tensor.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The chief's answer to one {@link ChiefModel.pull}: not ready (and why), or its variables. */
export type ChiefModelState =
  | { readonly ready: false; readonly reason: string }
  | {
      readonly ready: true;
      /** The chief's global variables, as one snapshot taken between two of its steps. */
      readonly values: ReadonlyMap<string, TensorValue>;
      /** The chief's global step in that snapshot (-1 when its session has none). */
      readonly globalStep: number;
      /** Says which chief process and session the values came from, for logs. */
      readonly origin: string;
    };

/** The chief's model, seen from a worker. */
export interface ChiefModel {
  /** The chief's address (`grpc://host:port`), named in messages. */
  readonly address: string;
  /**
   * Asks the chief once. A chief that is not up yet, restarting or not initialized yet resolves
   * `{ ready: false }`; errors that waiting cannot fix (a wrong cluster token) are thrown.
   */
  pull(): Promise<ChiefModelState>;
  /**
   * Resolves when the chief may have become ready (it published its model), or after
   * `timeoutMs`, whichever is first; never rejects. Without it, a waiting worker asks again
   * every `recoveryWaitSecs` (30 s by default): with it, the worker's first step follows the
   * chief's publish at once.
   */
  waitForChange?(timeoutMs: number): Promise<void>;
}
