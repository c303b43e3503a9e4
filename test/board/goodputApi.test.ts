/**
 * The board's `/board/goodput` route: every run's goodput from its goodput logs, the same figures
 * `computeGoodput` (and `monitored-session goodput`) gives; `?run=` one run, 404 for a run that
 * is none or has no logs. Hostile logs are not served: a run whose goodput folder is a link out
 * of the logdir, or whose log is a link or a directory, is left out and said once (onIssue),
 * never followed.
 */
import { mkdirSync, realpathSync, symlinkSync } from "node:fs";
import { join } from "node:path";

import { afterEach, describe, expect, it } from "vitest";

import { type Board, startBoard } from "../../src/board/BoardServer.js";
import { computeGoodput, GoodputRecorder, readGoodputLogs } from "../../src/index.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { send } from "./http.js";

const tempDir = useTempDirs("board-goodput-");
const boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

/** A run at `dir`: an event file, and (unless `logs` is false) a goodput log of one process that trained 6 s after 4 s of startup. */
const run = async (dir: string, clock: VirtualClock, logs = true): Promise<void> => {
  const w = new SummaryWriter(dir, { clock });
  w.addScalar("loss", 1, 0);
  await w.close();
  if (!logs) return;
  const r = GoodputRecorder.open({ logDir: dir, task: "local", chief: true, clock, processStartMs: clock.now() - 4_000 });
  r.ready(0);
  await clock.advance(6_000);
  r.end(60, 0);
};

describe("/board/goodput", () => {
  it("answers every run's figures (computeGoodput's), one run with ?run=, and 404 for a run without logs or none", async () => {
    const root = realpathSync(tempDir());
    const logdir = join(root, "logs");
    const clock = new VirtualClock();
    await run(join(logdir, "a"), clock);
    await run(join(logdir, "b", "train"), clock);
    await run(join(logdir, "c"), clock, false);
    const board = await startBoard(logdir, { port: 0, clock });
    boards.push(board);
    await board.store.loaded;
    const base = `http://127.0.0.1:${board.port}`;
    const all = await send(`${base}/board/goodput`);
    expect([all.status, all.headers["content-type"]]).toEqual([200, "application/json"]);
    const body = JSON.parse(all.text) as Record<string, { group: { goodput: number; totalSecs: number; badput: Record<string, number> } }>;
    expect(Object.keys(body).sort()).toEqual(["a", "b/train"]);
    expect(body["a"]?.group.goodput).toBeCloseTo(0.6, 10);
    expect(body["a"]?.group.badput["startup"]).toBe(4);
    const one = await send(`${base}/board/goodput?run=b%2Ftrain`);
    expect(one.status).toBe(200);
    expect(JSON.parse(one.text)).toEqual(JSON.parse(JSON.stringify(computeGoodput(readGoodputLogs(join(logdir, "b", "train"))))));
    expect((await send(`${base}/board/goodput?run=c`)).status).toBe(404);
    expect((await send(`${base}/board/goodput?run=nope`)).status).toBe(404);
  });

  it("a goodput folder linked out of the logdir, or a log that is a link or a directory, is not read: the run is left out, said once", async () => {
    const root = realpathSync(tempDir());
    const logdir = join(root, "logs");
    const clock = new VirtualClock();
    // Outside: real logs a link must not reach.
    await run(join(root, "outside"), clock);
    await run(join(logdir, "linked"), clock, false);
    symlinkSync(join(root, "outside", "goodput"), join(logdir, "linked", "goodput"));
    await run(join(logdir, "filelink"), clock, false);
    mkdirSync(join(logdir, "filelink", "goodput"));
    symlinkSync(join(root, "outside", "goodput", "local.jsonl"), join(logdir, "filelink", "goodput", "local.jsonl"));
    await run(join(logdir, "dir"), clock, false);
    mkdirSync(join(logdir, "dir", "goodput", "local.jsonl"), { recursive: true });
    // A goodput folder that is a link to the logdir itself (inside it, so the gate lets it by): the
    // folder must be the run's own, or `<logdir>/../goodput` would be read.
    await run(join(root, "."), clock);
    await run(join(logdir, "up"), clock, false);
    symlinkSync("..", join(logdir, "up", "goodput"));
    const issues: string[] = [];
    const board = await startBoard(logdir, { port: 0, clock, onIssue: (m) => issues.push(m) });
    boards.push(board);
    await board.store.loaded;
    const base = `http://127.0.0.1:${board.port}`;
    expect(JSON.parse((await send(`${base}/board/goodput`)).text)).toEqual({});
    await send(`${base}/board/goodput`);
    for (const r of ["linked", "filelink", "dir", "up"]) expect((await send(`${base}/board/goodput?run=${r}`)).status, r).toBe(404);
    // (The reader of the event files says the links out too, in its own words.)
    const goodputIssues = issues.filter((m) => m.startsWith("board: the goodput logs"));
    expect(goodputIssues, goodputIssues.join("\n")).toHaveLength(4);
    expect(goodputIssues.some((m) => m.includes('"up"') && m.includes("is a link"))).toBe(true);
    expect(goodputIssues.some((m) => m.includes('"linked"') && m.includes("is a link"))).toBe(true);
    expect(goodputIssues.some((m) => m.includes('"filelink"') && m.includes("is a symbolic link, which a log never is: remove it"))).toBe(true);
    expect(goodputIssues.some((m) => m.includes('"dir"') && m.includes("is not a regular file"))).toBe(true);
  });
});
