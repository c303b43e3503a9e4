/**
 * Termination notices on the real workload: the bundled TensorFlow.js job (examples/
 * tfjs-classifier.job.ts) run by the `monitored-session` command in a child process, as users
 * start it (node, npm, a terminal), with no delay between its synchronous steps. Each test acts
 * when the command prints a line, never after a fixed time.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { alive, repoRoot, startCli } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-signals-");
const exampleJob = join(repoRoot, "examples/tfjs-classifier.job.ts");
const gatedJob = join(repoRoot, "test/fixtures/cli/gated-job.ts");

/** A config for the bundled job in `dir`: checkpoints in `dir/ck`, TensorFlow's 600 s cadence by default. */
const config = (dir: string, extra = "checkpoint:\n  dir: ck\n  saveSecs: 600\n", module = exampleJob): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${module}\n${extra}lastStep: 100000000\nlogStepCountSteps: 0\n`);
  return file;
};

const savedStep = (output: string): number => {
  const m = /Preemption checkpoint for step (\d+) saved/.exec(output);
  if (m === null) throw new Error(`no preemption checkpoint in:\n${output}`);
  return Number(m[1]);
};

const hasScript = ((): boolean => {
  try {
    return existsSync("/usr/bin/script") || existsSync("/bin/script");
  } catch {
    return false;
  }
})();

describe("termination notices on the bundled TensorFlow.js job", () => {
  it("SIGTERM with saveSecs: 600 saves at the next step boundary and exits 42, naming the global step; the rerun resumes there", async () => {
    const dir = tempDir();
    const cfg = config(dir);
    const run = startCli(["run", cfg]);
    await run.waitFor("Starting at global step 0");
    await run.waitFor(/^step \d+\//m); // training is under way
    run.process.kill("SIGTERM");
    const r = await run.done;
    const out = r.stdout + r.stderr;
    expect(r.code, out).toBe(42);
    expect(out).toMatch(/termination notice \(SIGTERM\) at global step \d+/);
    const step = savedStep(out);
    expect(step).toBeGreaterThan(0);
    expect(existsSync(join(dir, "ck", `model.ckpt-${step}.index`))).toBe(true);
    expect(out).not.toMatch(/at run \d+/);
    // The handler's lines are events of its own stream, printed once: by the session it was
    // forwarded into, or by its own logger (the CLI's) before and after.
    expect(out.match(/PreemptionCheckpointHandler: termination notice \(SIGTERM\)/g)).toHaveLength(1);
    expect(out.match(/Preemption checkpoint for step \d+ saved/g)).toHaveLength(1);

    writeFileSync(cfg, `module: ${exampleJob}\ncheckpoint:\n  dir: ck\n  saveSecs: 600\nlastStep: ${step + 3}\nlogStepCountSteps: 0\n`);
    const again = await startCli(["run", cfg]).done;
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(`Starting at global step ${step} (restored from ${join(dir, "ck", `model.ckpt-${step}`)})`);
    expect(again.stderr).toContain(`Done at global step ${step + 3}.`);

    // The goodput log of both processes: the SIGTERM is the first one's preemption (its notice,
    // its save at step `step`, its end with 42); the second restored that step, so it trained
    // nothing again (no wastedProgress), and its restore is a bucket of its own.
    const records = readFileSync(join(dir, "ck", "goodput", "local.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { type: string; step?: number | null; exitCode?: number | null; bucket?: string });
    expect(records.filter((x) => x.type === "start")).toHaveLength(2);
    expect(records.filter((x) => x.type === "notice")).toHaveLength(1);
    expect(records.filter((x) => x.type === "mark").map((x) => x.step)).toContain(step);
    expect(records.filter((x) => x.type === "ready").map((x) => x.step)).toEqual([0, step]);
    expect(records.filter((x) => x.type === "end").map((x) => x.exitCode)).toEqual([42, 0]);
    // The first process: its notice, then (the preemption) its save's mark, then its end.
    const first = records.slice(0, records.findIndex((x, i) => i > 0 && x.type === "start"));
    expect(first.map((x) => x.type).filter((t) => t === "notice" || t === "end")).toEqual(["notice", "end"]);
    expect(first.findIndex((x) => x.type === "mark" && x.step === step)).toBeGreaterThan(first.findIndex((x) => x.type === "notice"));
    // The second: a restore before it was ready.
    const second = records.slice(first.length);
    expect(second.findIndex((x) => x.type === "phase" && x.bucket === "restore")).toBeLessThan(second.findIndex((x) => x.type === "ready"));
    expect(second.findIndex((x) => x.type === "phase" && x.bucket === "restore")).toBeGreaterThan(0);
    expect(again.stderr).toMatch(/Goodput \d+\.\d% of \S+ over 2 processes \(productive \S+(; badput: [^)]*)?\)\./);
    const goodput = await startCli(["goodput", join(dir, "ck"), "--json"]).done;
    expect(goodput.code, goodput.stderr).toBe(0);
    const local = (JSON.parse(goodput.stdout) as { tasks: { task: string; processes: number; badput: Record<string, number> }[] }).tasks[0];
    expect(local).toMatchObject({ task: "local", processes: 2 });
    expect(local?.badput["wastedProgress"]).toBe(0);
  });

  it("--log-format json: SIGTERM saves and exits 42; every line is one JSON record, and the handler's lines are there once each", async () => {
    const dir = tempDir();
    // No inherited NODE_OPTIONS: Node's own notes ("Debugger attached.") bypass the JSON console.
    const run = startCli(["run", config(dir), "--log-format", "json"], { env: { NODE_OPTIONS: "" } });
    await run.waitFor('"Starting at global step 0');
    await run.waitFor('"type":"progress"');
    run.process.kill("SIGTERM");
    const r = await run.done;
    expect(r.code, r.stderr).toBe(42);
    const records = [...r.stdout.split("\n"), ...r.stderr.split("\n")].filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as { time?: unknown; level?: string; type?: string; message?: string });
    for (const x of records) {
      expect(typeof x === "object" && x !== null && !Array.isArray(x), JSON.stringify(x)).toBe(true);
      // An ISO 8601 time (src/cli/logFormat.ts).
      expect(x.time, JSON.stringify(x)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(x.level !== undefined || x.type !== undefined, JSON.stringify(x)).toBe(true);
    }
    const messages = records.map((x) => x.message ?? "");
    expect(messages.filter((m) => /^PreemptionCheckpointHandler: termination notice \(SIGTERM\)/.test(m))).toHaveLength(1);
    expect(messages.filter((m) => /^Preemption checkpoint for step \d+ saved/.test(m))).toHaveLength(1);
    expect(messages).toContain("Preempted: checkpoint saved; exiting with 42 (run the same command again to resume).");
  });

  it("SIGHUP (a closed terminal) and the watched file are notices too, without periodic saves", async () => {
    const dir = tempDir();
    const hup = startCli(["run", config(dir, "checkpoint:\n  dir: ck\n  saveSteps: 100000000\n")]);
    await hup.waitFor(/^step \d+\//m);
    hup.process.kill("SIGHUP");
    const r = await hup.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("termination notice (SIGHUP)");
    savedStep(r.stderr);

    const dir2 = tempDir();
    const drain = join(dir2, "drain-now");
    const watched = startCli(["run", config(dir2, `checkpoint:\n  dir: ck\n  saveSecs: 600\npreemption:\n  watchFile: ${drain}\n`)]);
    await watched.waitFor(/^step \d+\//m);
    writeFileSync(drain, "");
    const w = await watched.done;
    expect(w.code, w.stderr).toBe(42);
    expect(w.stderr).toContain(`termination notice (the file ${drain} appeared)`);
    savedStep(w.stderr);
  });

  it("npm start and npm run cli exec the trainer (so npm's signal reaches it, as the next test shows for `npm run cli`)", () => {
    const scripts = (JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts;
    // `--conditions`: a job inside the repository imports the package by name (test/cli/selfReference.process.test.ts).
    expect(scripts["start"]).toBe("exec node --conditions=monitored-session-source --import tsx src/cli/main.ts run examples/tfjs-classifier.yaml");
    expect(scripts["cli"]).toBe("exec node --conditions=monitored-session-source --import tsx src/cli/main.ts");
  });

  it("through npm: SIGTERM to npm reaches the trainer, npm exits 42 once the trainer has saved and exited", async () => {
    const dir = tempDir();
    const cfg = config(dir);
    const run = startCli(["run", cfg], { launcher: "npm" });
    await run.waitFor(/^step \d+\//m);
    run.process.kill("SIGTERM");
    const r = await run.done;
    expect(r.code, r.stderr).toBe(42);
    savedStep(r.stderr);
    // No orphan trains on: nothing started with this config is still running.
    const ps = spawn("pgrep", ["-f", cfg]);
    const left = await new Promise<number | null>((ok) => ps.on("close", ok));
    expect(left).toBe(1); // pgrep: no process matched
  });

  it.skipIf(!hasScript)("on a terminal, Ctrl-C through npm start's launcher exits 42 after the preemption save", async () => {
    const dir = tempDir();
    const run = startCli(["run", config(dir)], { launcher: "tty", env: { CI: "" } });
    await run.waitFor("Starting at global step 0");
    await run.waitFor(/step \d+\/100000000/);
    // ^C typed on the terminal: the line discipline sends SIGINT to npm and the trainer.
    run.process.stdin?.write("\x03");
    const r = await run.done;
    expect(r.code, r.stdout).toBe(42);
    expect(r.stdout).toContain("termination notice (SIGINT)");
    const steps = readdirSync(join(dir, "ck")).filter((f) => /^model\.ckpt-[1-9]\d*\.index$/.test(f));
    expect(steps).toHaveLength(1);
  });

  it("the parent's death (npm or a shell killed) is a notice: the trainer saves and exits instead of training on as an orphan", async () => {
    const dir = tempDir();
    const cfg = config(dir);
    const log = join(dir, "out.log");
    const shell = spawn("sh", ["-c", `node --import tsx src/cli/main.ts run '${cfg}' > '${log}' 2>&1 & echo $!; wait`], {
      cwd: repoRoot,
      env: { ...process.env, CI: "true" },
      stdio: ["ignore", "pipe", "ignore"],
    });
    const pid = await new Promise<number>((ok) => shell.stdout.once("data", (d: Buffer) => ok(Number(d.toString().trim()))));
    const deadline = Date.now() + 45_000;
    const until = async (cond: () => boolean, what: string): Promise<void> => {
      while (!cond()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; log:\n${existsSync(log) ? readFileSync(log, "utf8") : ""}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    await until(() => existsSync(log) && /^step \d+\//m.test(readFileSync(log, "utf8")), "training");
    shell.kill("SIGKILL");
    await until(() => !alive(pid), "the trainer to exit");
    const out = readFileSync(log, "utf8");
    expect(out).toContain("termination notice (the parent process exited)");
    const step = savedStep(out);
    expect(existsSync(join(dir, "ck", `model.ckpt-${step}.index`))).toBe(true);
  });

  /** Runs the gated job, signals it while its module loads, then lets the import finish. */
  const signalWhileLoading = async (dir: string, checkpoint: string, signal: NodeJS.Signals, env: NodeJS.ProcessEnv = {}) => {
    const gate = join(dir, "go");
    const run = startCli(["run", config(dir, checkpoint, gatedJob)], { env: { CLI_TEST_GATE: gate, ...env } });
    await run.waitFor("job module loading");
    run.process.kill(signal);
    writeFileSync(gate, "");
    return run.done;
  };

  it("a notice before the session exists exits 42 without saving or creating anything", async () => {
    const dir = tempDir();
    const r = await signalWhileLoading(dir, "checkpoint:\n  dir: ck\n  saveSecs: 600\n", "SIGTERM");
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("Termination notice (SIGTERM) before training started: exiting with 42 without saving");
    expect(existsSync(join(dir, "ck"))).toBe(false);
  });

  it("a bad job still exits 2 when a signal arrives while it loads", async () => {
    const dir = tempDir();
    const r = await signalWhileLoading(dir, "checkpoint:\n  dir: ck\n", "SIGINT", { CLI_TEST_BAD_JOB: "1" });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain("default.fetches: expected fetches");
    expect(existsSync(join(dir, "ck"))).toBe(false);
  });
});
