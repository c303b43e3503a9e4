/**
 * Test helper: an embedded coordination service on its own thread, as it will be in the
 * chief's process while workers run elsewhere. Clients reach it through `portTransport`.
 */

import { MessageChannel, Worker } from "node:worker_threads";
import { portTransport, type PortTransport } from "../../../src/cluster/coordination/portTransport.js";

const script = (entry: string): string => `
import("tsx/esm/api").then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });
`;

/** A service thread and a transport onto it. */
export interface ServiceThread {
  readonly transport: PortTransport;
  stop(): Promise<void>;
}

/** Starts `serviceThreadMain.ts` with a service of `heartbeatTimeoutMs`. */
export const startServiceThread = (heartbeatTimeoutMs: number): ServiceThread => {
  const { port1, port2 } = new MessageChannel();
  const entry = new URL("./serviceThreadMain.ts", import.meta.url).pathname;
  const worker = new Worker(script(entry), {
    eval: true,
    workerData: { port: port2, heartbeatTimeoutMs },
    transferList: [port2],
  });
  worker.on("error", (e) => console.error("service thread failed:", e));
  const transport = portTransport(port1);
  return {
    transport,
    stop: async () => {
      transport.close();
      await worker.terminate();
    },
  };
};
