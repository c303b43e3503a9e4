/** What boardCommand.test.ts and boardCommand.process.test.ts share: tempDir, servers, runsOnceLoaded, logdirWithOneRun. */
import { type Server } from "node:net";
import { join } from "node:path";
import { afterEach } from "vitest";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

export const tempDir = useTempDirs("board-cli-");
export const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** `/data/runs` once the board has read the run (it answers while it loads): a bounded poll. */
export const runsOnceLoaded = async (url: string, headers: Record<string, string> = {}): Promise<string> => {
  for (let i = 0; i < 1000; i++) {
    const r = await send(`${url}/data/runs`, { headers });
    if (r.text !== "[]") return r.text;
  }
  throw new Error("the run never appeared");
};

export const logdirWithOneRun = async (): Promise<string> => {
  const logdir = tempDir();
  const w = new SummaryWriter(join(logdir, "train"), { clock: new VirtualClock() });
  w.addScalar("loss", 1, 1);
  await w.close();
  return logdir;
};
