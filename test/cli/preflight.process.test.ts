/**
 * What `monitored-session run` checks before anything is written: each problem exits 2 with one
 * line (no stack trace), and the directory holds only what the test put there.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { cli, linearJob, listTree, root, spawnResult } from "../util/cli.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-preflight-");
const asNobody = process.getuid?.() === 0 && spawnSync("setpriv", ["--version"]).status === 0;
if (!asNobody) console.warn("SKIPPED the unwritable-directory test: it needs root and setpriv to run as an unprivileged user");

/**
 * A job module (TypeScript) in `dir` on a small Graph with ops `train`, `loss` and variable `w`.
 * `dir` gets a package.json of `"type": "module"`, as a user's ESM project has (in a CommonJS
 * scope tsx would load a second copy of the library, whose `Graph` is another class).
 */
const writeJob = (dir: string, name: string, body: string): void => {
  writeFileSync(join(dir, "package.json"), '{ "type": "module" }\n');
  writeFileSync(
    join(dir, name),
    `import { defineJob } from ${JSON.stringify(join(root, "src/config/index.js"))};
import { Graph } from ${JSON.stringify(join(root, "src/index.js"))};
const graph = new Graph();
const step = graph.globalStep();
const w = graph.variable("w", 0);
graph.op("loss", (ctx) => (ctx.read(w) - 3) ** 2);
graph.op("train", (ctx) => { ctx.assign(w, ctx.read(w) + 0.1); return ctx.assignAdd(step, 1); });
export default defineJob(${body});
`,
  );
};

/** Exit 2, exactly one line on stderr that contains `expected`, no stack trace, nothing created. */
const expectRefused = async (dir: string, config: string, expected: string | RegExp, env: Record<string, string> = {}): Promise<void> => {
  const before = listTree(dir);
  const r = await cli(["run", join(dir, config)], env);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines, r.stderr).toHaveLength(1);
  if (typeof expected === "string") expect(lines[0]).toContain(expected);
  else expect(lines[0]).toMatch(expected);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.code).toBe(2);
  expect(listTree(dir)).toEqual(before);
};

describe("run: names are checked against the session before anything is written", () => {
  it("a job fetch that the graph lacks: one line with a did-you-mean", async () => {
    const dir = tempDir();
    writeJob(dir, "job.ts", `{ graph, fetches: { train: "train", loss: "los" } }`);
    writeFileSync(join(dir, "c.yaml"), "module: ./job.ts\ncheckpoint: { dir: ckpt, saveSteps: 1 }\nsummaries: { dir: logs }\nlastStep: 3\n");
    await expectRefused(dir, "c.yaml", /default\.fetches\.loss: "los" is not an op or variable of the session \(did you mean "loss"\?\)/);
  });

  it("hooks' lossTensor and tensors, and a sessionFactory job (the session is built in memory), all listed", async () => {
    const dir = tempDir();
    writeJob(dir, "job.ts", `{ sessionFactory: () => graph.session(), fetches: ["train", "wx"] }`);
    writeFileSync(
      join(dir, "c.yaml"),
      [
        "module: ./job.ts",
        "checkpoint: { dir: ckpt, saveSteps: 1 }",
        "lastStep: 3",
        "hooks:",
        "  - { type: NanTensorHook, lossTensor: Loss }",
        "  - { type: LoggingTensorHook, tensors: { weight: w, step: global_stp }, everyNIter: 1 }",
        "",
      ].join("\n"),
    );
    const r = await cli(["run", join(dir, "c.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("3 problems:");
    expect(r.stderr).toContain('default.fetches[1]: "wx" is not an op or variable of the session (did you mean "w"?)');
    expect(r.stderr).toContain('hooks[0].lossTensor: "Loss" is not an op or variable of the session (did you mean "loss"?)');
    expect(r.stderr).toContain('hooks[1].tensors.step: "global_stp" is not an op or variable of the session (did you mean "global_step"?)');
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(listTree(dir)).toEqual(["c.yaml", "job.ts", "package.json"]);
  });
});

/** ` (line L, column C)` of the first `needle` in `text` (1-based, as the command prints it). */
const at = (text: string, needle: string): string => {
  const offset = text.indexOf(needle);
  if (offset < 0) throw new Error(`${needle} is not in the text`);
  const before = text.slice(0, offset);
  return ` (line ${before.split("\n").length}, column ${offset - before.lastIndexOf("\n")})`;
};

describe("run: every problem in one run, each with its place in the file", () => {
  it("type errors, a misspelled hook type and misspelled tensor names together, each with its line and column", async () => {
    const dir = tempDir();
    writeJob(dir, "job.ts", `{ graph, fetches: ["train", "los"] }`);
    const yaml = [
      "module: ./job.ts",
      "checkpoint: { dir: ckpt, saveSteps: -5 }",
      "lastStep: 3",
      "hooks:",
      "  - { type: NanTensorHook, lossTensor: Loss }",
      "  - { type: StopAtStepHook, lastStep: -2 }",
      "  - { type: NanTensorHok, lossTensor: loss }",
      "  - type: LoggingTensorHook",
      "    tensors: [w, lss]",
      "    everyNIter: 1",
      "",
    ].join("\n");
    writeFileSync(join(dir, "c.yaml"), yaml);
    const r = await cli(["run", join(dir, "c.yaml")]);
    expect(r.code).toBe(2);
    const file = join(dir, "c.yaml");
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${file}: 6 problems:`,
      `  checkpoint.saveSteps: expected an integer >= 0 or null, got -5${at(yaml, "-5")}`,
      `  hooks[1].lastStep: expected an integer >= 0, got -2${at(yaml, "-2")}`,
      expect.stringMatching(new RegExp(`^  hooks\\[2\\]\\.type: unknown hook type "NanTensorHok" \\(did you mean "NanTensorHook"\\?\\); registered: .*${escape(at(yaml, "NanTensorHok,"))}$`)),
      // The names: the job's (in the module, so no place in the file), then the hooks' that decoded.
      expect.stringMatching(/^ {2}default\.fetches\[1\]: "los" is not an op or variable of the session \(did you mean "loss"\?\); it has [^()]*$/),
      expect.stringMatching(new RegExp(`^  hooks\\[0\\]\\.lossTensor: "Loss" is not an op or variable of the session \\(did you mean "loss"\\?\\); .*${escape(at(yaml, "Loss"))}$`)),
      expect.stringMatching(new RegExp(`^  hooks\\[3\\]\\.tensors\\[1\\]: "lss" is not an op or variable of the session \\(did you mean "loss"\\?\\); .*${escape(at(yaml, "lss"))}$`)),
    ]);
    expect(r.stderr).not.toMatch(/^\s+at /m);
    expect(listTree(dir)).toEqual(["c.yaml", "job.ts", "package.json"]);
  });

  it("an output directory that is a file, and the module's own problems, beside the file's: each under its file, exit 2", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "logs"), "a file");
    writeJob(dir, "job.ts", `{ graph, lastStep: -1 }`);
    const yaml = "module: ./job.ts\ncheckpoint: { dir: ckpt, saveStep: 1 }\nsummaries: { dir: logs }\n";
    writeFileSync(join(dir, "c.yaml"), yaml);
    const r = await cli(["run", join(dir, "c.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${join(dir, "c.yaml")}: 2 problems:`,
      expect.stringMatching(new RegExp(`^  checkpoint\\.saveStep: unknown field "saveStep" \\(did you mean "saveSteps"\\?\\); .*${escape(at(yaml, "1 }"))}$`)),
      `  summaries.dir: ${join(dir, "logs")} is an existing file, not a directory: choose another directory, or move the file away${at(yaml, "logs")}`,
      `${join(dir, "job.ts")}: default.lastStep: expected an integer >= 0, got -1`,
    ]);
    expect(listTree(dir)).toEqual(["c.yaml", "job.ts", "logs", "package.json"]);
  });

  it("a module whose code throws, beside a problem of the file: both printed, exit 2 (the file is bad)", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "job.mjs"), "throw new Error('no data set configured');\n");
    writeFileSync(join(dir, "c.yaml"), "module: ./job.mjs\nlastStep: -3\n");
    const r = await cli(["run", join(dir, "c.yaml")]);
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toEqual([
      `${join(dir, "c.yaml")}: lastStep: expected an integer >= 0, got -3 (line 2, column 11)`,
      `${join(dir, "c.yaml")}: module: importing ${join(dir, "job.mjs")} failed: the module threw Error: no data set configured`,
    ]);
  });
});

/** `s` with the characters of a regular expression escaped. */
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

describe("run: files and directories are checked before anything is written", () => {
  it("checkpoint.basename must be a plain file name", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\ncheckpoint: { dir: ckpt, basename: ../escape }\n`);
    await expectRefused(dir, "c.yaml", "checkpoint.basename: expected a plain file name (no /, \\ or .., not empty), got \"../escape\"");
  });

  it("a checkpoint directory that is an existing file", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "ckpt"), "not a directory");
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\ncheckpoint: { dir: ckpt }\n`);
    await expectRefused(dir, "c.yaml", `checkpoint.dir: ${join(dir, "ckpt")} is an existing file, not a directory`);
  });

  it("a summary directory under a file", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "f"), "");
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\nsummaries: { dir: f/logs }\n`);
    await expectRefused(dir, "c.yaml", `summaries.dir: ${join(dir, "f")} is a file, so ${join(dir, "f/logs")} cannot be created`);
  });

  it.skipIf(!asNobody)("a checkpoint directory the user cannot write (run as nobody with setpriv)", async () => {
    const dir = tempDir();
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, "ro"), { mode: 0o555 });
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\ncheckpoint: { dir: ro/ckpt }\n`, { mode: 0o644 });
    const r = await spawnResult(
      "setpriv",
      ["--reuid=65534", "--regid=65534", "--clear-groups", process.execPath, "--import", "tsx", "src/cli/main.ts", "run", join(dir, "c.yaml")],
      { env: { ...process.env, CI: "true", HOME: dir } },
    );
    expect(r.stderr.trimEnd().split("\n"), r.stderr).toEqual([
      `${join(dir, "c.yaml")}: checkpoint.dir: ${join(dir, "ro")} is not writable by uid 65534, so ${join(dir, "ro/ckpt")} cannot be created there: choose a directory you can write to, or fix its permissions (chmod/chown) (line 2, column 20)`,
    ]);
    expect(r.code).toBe(2);
    expect(listTree(dir)).toEqual(["c.yaml", "ro/"]);
  });
});

describe("run: the module is checked before anything is written", () => {
  it("a module that is not JavaScript or TypeScript", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "job.py"), "print('hi')\n");
    writeFileSync(join(dir, "c.yaml"), "module: ./job.py\ncheckpoint: { dir: ckpt }\n");
    await expectRefused(dir, "c.yaml", `module: ${join(dir, "job.py")} is not JavaScript or TypeScript (expected .js, .mjs, .cjs, .ts, .mts, .cts)`);
  });

  it("a .js module that does not parse", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "job.js"), "\u0000\u0001 this is not javascript {{{\n");
    writeFileSync(join(dir, "c.yaml"), "module: ./job.js\ncheckpoint: { dir: ckpt }\n");
    await expectRefused(dir, "c.yaml", /module: .*job\.js is not valid JavaScript or TypeScript: /);
  });

  it("a module whose own code throws exits 1 with one line; --verbose adds the stack", async () => {
    const dir = tempDir();
    writeFileSync(join(dir, "job.mjs"), "throw new Error('no data set configured');\n");
    writeFileSync(join(dir, "c.yaml"), "module: ./job.mjs\ncheckpoint: { dir: ckpt }\n");
    const r = await cli(["run", join(dir, "c.yaml")]);
    expect(r.code).toBe(1);
    expect(r.stderr.trimEnd().split("\n")).toEqual([`${join(dir, "c.yaml")}: module: importing ${join(dir, "job.mjs")} failed: the module threw Error: no data set configured`]);
    const v = await cli(["run", "--verbose", join(dir, "c.yaml")]);
    expect(v.code).toBe(1);
    expect(v.stderr).toMatch(/^\s+at .*job\.mjs/m);
    expect(listTree(dir)).toEqual(["c.yaml", "job.mjs"]);
  });

  it("a YAML alias bomb", async () => {
    const dir = tempDir();
    const levels = ["a: &a [x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 9; i++) {
      const prev = String.fromCharCode(96 + i);
      const cur = String.fromCharCode(97 + i);
      levels.push(`${cur}: &${cur} [${Array(9).fill(`*${prev}`).join(", ")}]`);
    }
    writeFileSync(join(dir, "c.yaml"), `module: ${linearJob}\n${levels.join("\n")}\n`);
    await expectRefused(dir, "c.yaml", 'YAML aliases expand too much (more than 100 alias uses, as in an "alias bomb")');
  });
});
