/**
 * The command line's parsing (src/cli/program.ts), in this process: `launch` given a command
 * without `--` says where the command goes, in one line, and exits 2; other usage errors keep
 * commander's line.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { standbyOf } from "../../src/cli/program.js";
import { cliInProcess } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-program-");

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

describe("launch --chaos: its usage errors, before anything starts", () => {
  it("--chaos-report without --chaos: one line, exit 2", async () => {
    const r = await cliInProcess(["launch", "--workers", "2", "--chaos-report", "r.json", "job.yaml"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("monitored-session launch: --chaos-report is the report of --chaos; give --chaos <file> too, or leave --chaos-report out\n");
  });

  it("a schedule that is missing or wrong: one line per problem, naming the file and the key, exit 2", async () => {
    const dir = tempDir();
    const missing = await cliInProcess(["launch", "--workers", "2", "--chaos", join(dir, "none.yaml"), "job.yaml"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^monitored-session launch: --chaos .*none\.yaml does not exist: give a JSON or YAML file/);
    const bad = join(dir, "bad.yaml");
    writeFileSync(bad, "faults:\n  - { atSecs: -1, kind: sigterm, target: worker:3 }\n");
    const r = await cliInProcess(["launch", "--workers", "2", "--chaos", bad, "--", "node", "train.js"]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toEqual([expect.stringMatching(/^monitored-session launch: --chaos .*bad\.yaml: faults\[0\]\.atSecs: /)]);
    writeFileSync(bad, "faults:\n  - { atSecs: 1, kind: sigterm, target: worker:3 }\n");
    const r2 = await cliInProcess(["launch", "--workers", "2", "--chaos", bad, "--", "node", "train.js"]);
    expect(r2.stderr).toMatch(/faults\[0\]\.target: worker:3 is not a task of this group \(launch --workers 2 has worker:0 only\)/);
  });
});

describe("launch --chaos with from: training", () => {
  it("with -- <command> (whose tasks do not say when they train): one line, exit 2", async () => {
    const schedule = join(tempDir(), "chaos.yaml");
    writeFileSync(schedule, "from: training\nfaults:\n  - { atSecs: 1, kind: sigterm, target: worker:0 }\n");
    const r = await cliInProcess(["launch", "--workers", "2", "--chaos", schedule, "--", "node", "train.js"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`monitored-session launch: --chaos ${schedule}: from: training is for launch <config> (its tasks say when they train); a command after -- does not say: use from: launch\n`);
  });
});

describe("launch --standby: its usage errors, before anything starts", () => {
  it("without --max-restarts or --chaos (nothing would restart): one line, exit 2", async () => {
    const r = await cliInProcess(["launch", "--workers", "2", "--standby", "job.yaml"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      "monitored-session launch: --standby keeps processes for a restart, and this launch never restarts its group; give --max-restarts <k> (a preemption then restarts it too) or --chaos <file>, or leave --standby out\n",
    );
  });

  it("with -- <command>: one line, exit 2", async () => {
    const r = await cliInProcess(["launch", "--workers", "2", "--standby", "--max-restarts", "1", "--", "node", "train.js"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe("monitored-session launch: --standby is for launch <config> (a standby is run with its modules loaded); a command after -- starts as a new process each time\n");
  });
});

describe("launch: standbys by default where a restart can happen", () => {
  it.each([
    [undefined, 0, false, false],
    [undefined, 1, false, true],
    [undefined, 0, true, true],
    [false, 2, true, false],
    [true, 1, false, true],
  ] as const)("--standby given as %s, --max-restarts %d, chaos %s: standbys %s", (given, maxRestarts, chaos, expected) => {
    expect(standbyOf(given, maxRestarts, chaos)).toBe(expected);
  });

  it("--no-standby is accepted without restarts (unlike --standby): launch goes on to read the configuration", async () => {
    const r = await cliInProcess(["launch", "--workers", "2", "--no-standby", "missing.yaml"]);
    expect(r.stderr).toMatch(/missing\.yaml/);
    expect(r.stderr).not.toMatch(/standby/);
  });
});
