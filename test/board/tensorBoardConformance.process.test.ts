/**
 * The board against TensorBoard itself, on event files written by TensorBoard's own Python
 * writer (test/fixtures/tensorboard/pyrun, made by make_fixtures.py there with TensorBoard
 * 2.21.0, which also recorded TensorBoard's answers in responses.json). Every data route the
 * fixture covers must answer what TensorBoard answered, value for value; text is HTML from two
 * different markdown renderers, so it is compared for what matters (the markdown rendered, the
 * script escaped, the javascript: link gone).
 *
 * Where TensorBoard is installed (`TENSORBOARD=/path/to/tensorboard`), a second test starts it
 * on a logdir written by our SummaryWriter and compares the same routes live; without it, that
 * test skips with a message.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { freePorts } from "../util/cliChild.js";
import { send } from "./http.js";
import { getJson, ourBoard, tempDir } from "./tensorBoardConformance.testHelpers.js";

const TENSORBOARD = process.env["TENSORBOARD"];
const haveTensorBoard = TENSORBOARD !== undefined && existsSync(TENSORBOARD);
if (!haveTensorBoard) console.warn("live comparison with TensorBoard SKIPPED: set TENSORBOARD=/path/to/tensorboard (pip install tensorboard) to run it");

describe("the board answers as TensorBoard does", () => {
  it.runIf(haveTensorBoard)("on files written by our SummaryWriter: the same routes as a live TensorBoard answers them", { timeout: 120_000 }, async () => {
    const logdir = tempDir();
    const w = new SummaryWriter(join(logdir, "train"), { clock: new VirtualClock({ startMs: 1_700_000_000_000 }) });
    for (let s = 0; s < 50; s++) {
      w.addScalar("loss", 1 / (s + 1), s);
      w.addHistogram("weights", Array.from({ length: 20 }, (_, i) => i * (s + 1)), s);
      w.addText("notes", `**step ${s}** <script>alert(1)</script>`, s);
    }
    await w.close();
    const routes = [
      "data/runs",
      "data/plugin/scalars/tags",
      "data/plugin/scalars/scalars?run=train&tag=loss",
      "data/plugin/histograms/tags",
      "data/plugin/histograms/histograms?run=train&tag=weights",
      "data/plugin/text/tags",
      "data/plugin/text/text?run=train&tag=notes",
    ];
    const [port] = await freePorts(1);
    const tb = spawn(TENSORBOARD as string, ["--logdir", logdir, "--load_fast=false", "--port", String(port), "--host", "127.0.0.1"], { stdio: "ignore" });
    try {
      const theirsBase = `http://127.0.0.1:${port as number}`;
      // Bounded: TensorBoard loads in the background; wait until it lists every plugin's tag.
      for (let i = 0; ; i++) {
        const ok = await send(`${theirsBase}/data/plugin/text/tags`).then((r) => r.status === 200 && r.text.includes("notes"), () => false);
        if (ok) break;
        if (i > 600) throw new Error("TensorBoard did not load the logdir within 60 s");
        await new Promise((r) => setTimeout(r, 100));
      }
      const oursBase = await ourBoard(logdir);
      for (const route of routes) {
        const [ours, theirs] = [await getJson(oursBase, route), await getJson(theirsBase, route)];
        if (route.startsWith("data/plugin/text/text")) {
          // TensorBoard keeps a reservoir of 10 text values per tag by default; the board keeps every one.
          const ourRows = (ours as { wall_time: number; step: number }[]).map((r) => `${r.wall_time}@${r.step}`);
          const theirRows = (theirs as { wall_time: number; step: number }[]).map((r) => `${r.wall_time}@${r.step}`);
          expect(ourRows).toHaveLength(50);
          expect(ourRows).toEqual(expect.arrayContaining(theirRows));
        } else expect(ours, route).toEqual(theirs);
      }
    } finally {
      tb.kill("SIGTERM");
    }
  });
});
