/** The body of `serviceThread.ts`'s thread: one embedded service served on the given port. */

import { type MessagePort, workerData } from "node:worker_threads";
import { EmbeddedCoordinationService } from "../../../src/cluster/coordination/index.js";
import { servePort } from "../../../src/cluster/coordination/portTransport.js";

const { port, heartbeatTimeoutMs } = workerData as { port: MessagePort; heartbeatTimeoutMs: number };
servePort(new EmbeddedCoordinationService({ heartbeatTimeoutMs }), port);
