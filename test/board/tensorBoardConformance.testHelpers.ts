/** What tensorBoardConformance.test.ts and tensorBoardConformance.process.test.ts share: tempDir, boards, getJson, ourBoard. */
import { afterEach, expect } from "vitest";
import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

export const tempDir = useTempDirs("board-tb-conformance-");
export const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

export const getJson = async (base: string, route: string): Promise<unknown> => {
  const r = await send(`${base}/${route}`);
  expect(r.status, `${route}: ${r.text}`).toBe(200);
  return JSON.parse(r.text) as unknown;
};

/** Our board on `logdir`, read through. */
export const ourBoard = async (logdir: string): Promise<string> => {
  const board = await startBoard(logdir, { port: 0, clock: new VirtualClock() });
  boards.push(board);
  await board.store.loaded;
  return `http://127.0.0.1:${board.port}`;
};
