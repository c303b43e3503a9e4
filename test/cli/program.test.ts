/**
 * The command line's parsing (src/cli/program.ts), in this process: `launch` given a command
 * without `--` says where the command goes, in one line, and exits 2; other usage errors keep
 * commander's line.
 */
import { describe, expect, it } from "vitest";

import { cliInProcess } from "../util/cli.js";

const hint = (launchArgs: string): string =>
  `monitored-session launch: a command to run on each task goes after --: monitored-session launch ${launchArgs}\n`;

describe("launch: a command without --", () => {
  it.each([
    // `launch --workers 3 node train.js`: commander's "too many arguments"
    [["--workers", "3", "node", "train.js"], "--workers 3 -- node train.js"],
    // a Node flag after the command's first word: commander's "unknown option '--import'"
    [["--workers", "3", "node", "--import", "tsx", "train.ts"], "--workers 3 -- node --import tsx train.ts"],
    // launch's own flags stay before --, wherever they were
    [["--workers", "3", "node", "train.js", "--max-restarts", "2"], "--workers 3 --max-restarts 2 -- node train.js"],
    // an operand equal to a flag's value
    [["--workers", "3", "3", "train.js"], "--workers 3 -- 3 train.js"],
  ])("%j: one line showing the command after --, exit 2", async (args, fixed) => {
    const r = await cliInProcess(["launch", ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(hint(fixed));
    expect(r.stdout).toBe("");
  });

  it.each([
    [["--workers", "3", "--import", "tsx", "train.ts"], "--workers 3 -- node --import tsx train.ts"],
    [["--workers", "3", "--require=./setup.cjs", "train.js"], "--workers 3 -- node --require=./setup.cjs train.js"],
    [["--workers", "3", "-r", "./setup.cjs", "train.js"], "--workers 3 -- node -r ./setup.cjs train.js"],
  ])("%j: a flag of Node's where the command starts: the line says so and shows the command after -- with node first, exit 2", async (args, fixed) => {
    const r = await cliInProcess(["launch", ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`monitored-session launch: unknown option '${args[2] as string}', a flag of Node's: the command to run on each task goes after --, with its program first: monitored-session launch ${fixed}\n`);
    expect(r.stdout).toBe("");
  });

  it.each([
    [["--workers", "2", "--bogus", "job.yaml"], "error: unknown option '--bogus'\n"],
    [["--worker", "2", "job.yaml"], "error: required option '--workers <n>' not specified\n"],
  ])("%j: an unknown option before any operand is commander's error, not the hint", async (args, line) => {
    const r = await cliInProcess(["launch", ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(line);
  });

  it("other commands keep commander's line for an operand too many", async () => {
    const r = await cliInProcess(["run", "a.yaml", "b.yaml"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error: too many arguments for 'run'. Expected 1 argument but got 2.");
  });
});
