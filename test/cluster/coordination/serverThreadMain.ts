/** The body of `serverThread.ts`'s thread: a coordination host on loopback. */

import { parentPort, workerData } from "node:worker_threads";
import { hostCoordinationService } from "../../../src/cluster/coordination/index.js";
import type { Logger } from "../../../src/Logger.js";

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (m) => console.error(m) };

const { heartbeatTimeoutMs, token } = workerData as { heartbeatTimeoutMs: number; token?: string };
const host = await hostCoordinationService(
  { chief: ["127.0.0.1:0"] },
  { coordination: { heartbeatTimeoutMs }, ...(token === undefined ? {} : { token }), logger: quiet },
);
parentPort?.postMessage({ target: host.server.target });
parentPort?.once("message", () => {
  void host.stop().then(() => parentPort?.postMessage("stopped"));
});
