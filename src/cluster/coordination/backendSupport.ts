/**
 * What a backend's `connect` (backend.ts) does when its service does not live on the task's
 * server: start the task's server as given, then make the client, and stop the server again if
 * the client cannot be made. Loaded with a backend's implementation, never by a configuration.
 *
 * @module
 */

import { Server } from "../Server.js";
import type { BackendTask, CoordinationConnection } from "./backend.js";
import type { CoordinationClient } from "./CoordinationClient.js";

/**
 * Starts `task`'s server, then `client()`; a client that cannot be made stops the server and
 * throws. `where` and `stop` are the connection's (the server's stop runs after `stop`'s own).
 */
export const serveTask = async (
  task: BackendTask,
  client: () => CoordinationClient | Promise<CoordinationClient>,
  where: string,
  stop: () => Promise<void> = () => Promise.resolve(),
): Promise<CoordinationConnection> => {
  const server = new Server(task.spec, { ...task.serverOptions, start: false });
  await server.start();
  try {
    const c = await client();
    return {
      client: c,
      where,
      stop: async () => {
        await stop().catch(() => undefined);
        await server.stop();
      },
    };
  } catch (e) {
    await server.stop().catch(() => undefined);
    throw e;
  }
};
