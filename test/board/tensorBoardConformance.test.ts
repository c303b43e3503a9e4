/**
 * The board against TensorBoard itself, on event files written by TensorBoard's own Python
 * writer (test/fixtures/tensorboard/pyrun, made by make_fixtures.py there with TensorBoard
 * 2.21.0, which also recorded TensorBoard's answers in responses.json). Every data route the
 * fixture covers must answer what TensorBoard answered, value for value; text is HTML from two
 * different markdown renderers, so it is compared for what matters (the markdown rendered, the
 * script escaped, the javascript: link gone).
 *
 * Where TensorBoard is installed (`TENSORBOARD=/path/to/tensorboard`),
 * tensorBoardConformance.process.test.ts starts it on a logdir written by our SummaryWriter and
 * compares the same routes live.
 */
import { cpSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

import { getJson, ourBoard, tempDir } from "./tensorBoardConformance.testHelpers.js";

const FIXTURES = resolve(fileURLToPath(new URL("../fixtures/tensorboard", import.meta.url)));
const recorded = JSON.parse(readFileSync(join(FIXTURES, "responses.json"), "utf8")) as { tensorboard: string; responses: Record<string, unknown> };

/** Text routes: the same rows, the markdown rendered, nothing executable. */
const expectSameText = (ours: unknown, theirs: unknown): void => {
  const a = ours as { wall_time: number; step: number; text: string }[];
  const b = theirs as { wall_time: number; step: number; text: string }[];
  expect(a.map((r) => [r.wall_time, r.step])).toEqual(b.map((r) => [r.wall_time, r.step]));
  for (const [i, r] of a.entries()) {
    expect(r.text).toContain(`<strong>step ${i}</strong>`);
    expect(b[i]?.text).toContain(`<strong>step ${i}</strong>`);
    expect(r.text).toContain("&lt;script&gt;");
    // markdown-it leaves a javascript: link as plain text (TensorBoard keeps <a> without its href): never a link.
    expect(r.text).not.toMatch(/<script|href\s*=\s*["']?\s*javascript:/i);
  }
};

describe("the board answers as TensorBoard does", () => {
  it(`on files written by TensorBoard's Python writer: every route as TensorBoard ${recorded.tensorboard} answered it (recorded)`, async () => {
    const logdir = tempDir();
    cpSync(join(FIXTURES, "pyrun"), join(logdir, "pyrun"), { recursive: true });
    const base = await ourBoard(logdir);
    for (const [route, theirs] of Object.entries(recorded.responses)) {
      const ours = await getJson(base, route);
      if (route.startsWith("data/plugin/text/text")) expectSameText(ours, theirs);
      else expect(ours, route).toEqual(theirs);
    }
  });

});
