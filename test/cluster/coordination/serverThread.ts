/**
 * Test helper: the chief's `Server` hosting an embedded coordination service on its own thread
 * (loopback, port 0), so that blocking the test's thread blocks the clients but not the server.
 */

import { Worker } from "node:worker_threads";

const script = (entry: string): string => `
import("tsx/esm/api").then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });
`;

/** A server thread: its target, and how to stop it. */
export interface ServerThread {
  readonly target: string;
  stop(): Promise<void>;
}

/** Starts `serverThreadMain.ts`: a coordination host with `heartbeatTimeoutMs` (and `token`, if given). */
export const startServerThread = (heartbeatTimeoutMs: number, token?: string): Promise<ServerThread> => {
  const entry = new URL("./serverThreadMain.ts", import.meta.url).pathname;
  const worker = new Worker(script(entry), { eval: true, workerData: { heartbeatTimeoutMs, token } });
  return new Promise<ServerThread>((resolve, reject) => {
    const timer = setTimeout(() => {
      void worker.terminate();
      reject(new Error("test deadline: the server thread did not start within 20 s"));
    }, 20_000);
    worker.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    worker.once("message", (msg: { target: string }) => {
      clearTimeout(timer);
      resolve({
        target: msg.target,
        stop: async () => {
          worker.postMessage("stop");
          await new Promise<void>((r) => {
            const t = setTimeout(r, 10_000);
            worker.once("message", () => {
              clearTimeout(t);
              r();
            });
          });
          await worker.terminate();
        },
      });
    });
  });
};
