/**
 * The `monitored-session` command as a new user runs it: a configuration in a temp directory,
 * the tiny Graph job of test/fixtures/cli, child processes (cwd = project root so tsx resolves).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { TensorBundleReader } from "../../src/checkpoint/index.js";
import { eventFiles, readEvents } from "../summary/decoder.js";
import { cli, cliInProcess, linearJob as job, root } from "../util/cli.js";
import { freePorts, startCli } from "../util/cliChild.js";

describe("monitored-session CLI", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "ms-cli-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("run: trains the job to its last step, saving checkpoints, with plain progress lines in CI", async () => {
    const config = join(dir, "train.yaml");
    await writeFile(config, `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 10\nlastStep: 30\nlogStepCountSteps: 0\nhooks:\n  - type: NanTensorHook\n    lossTensor: loss\n`);
    const r = await cli(["run", config]);
    expect(r.stderr).toContain("Starting at global step 0; last step 30.");
    expect(r.code).toBe(0);
    // the last progress line: step, rate, loss (the job fetches "loss") and ETA
    expect(r.stdout.trim().split("\n").at(-1)).toMatch(/^step 30\/30 \| [\d.]+ steps\/s \| loss [\d.e+-]+ \| eta 0s$/);
    expect(readFileSync(join(dir, "ckpt", "checkpoint"), "utf8")).toContain("model.ckpt-30");
    // Where everything is, at the start and at the end.
    for (const line of [`Checkpoints: ${join(dir, "ckpt")}`, `TensorBoard logs: ${join(dir, "ckpt")}`]) expect(r.stderr.split(line).length - 1, line).toBe(2);

    const inspect = await cli(["inspect", join(dir, "ckpt")]);
    expect(inspect.code).toBe(0);
    expect(inspect.stdout).toMatch(/\* model\.ckpt-30\s+30\s+[\d.]+ (B|KiB)\s+\S+\s+TensorFlow V2 bundle\s+ok/);
    expect(inspect.stdout).toContain("4 checkpoints, all verified.");
  });

  it("run: checkpoint.retention names a plugin's retention type, which decides what stays in the directory", async () => {
    const config = join(dir, "train.yaml");
    const plugin = join(root, "test/fixtures/cli/retention-plugin.ts");
    await writeFile(
      config,
      `module: ${job}\nplugins: [${plugin}]\ncheckpoint:\n  dir: ckpt\n  saveSteps: 1\n  retention:\n    type: NewestAndEveryNth\n    newest: 2\n    every: 5\nlastStep: 12\nlogStepCountSteps: 0\n`,
    );
    const r = await cli(["run", config]);
    expect(r.code, r.stderr).toBe(0);
    const kept = readdirSync(join(dir, "ckpt")).filter((f) => f.endsWith(".index")).map((f) => Number(/-(\d+)\.index$/.exec(f)?.[1])).sort((a, b) => a - b);
    expect(kept).toEqual([0, 5, 10, 11, 12]);
  });

  it("run: cluster.backend names a plugin's coordination backend, which the task joins (its setting and its rule checked first)", async () => {
    const config = join(dir, "train.yaml");
    const plugin = join(root, "test/fixtures/cli/backend-plugin.ts");
    const [port] = await freePorts(1);
    const env = { TF_CONFIG: JSON.stringify({ cluster: { chief: [`127.0.0.1:${port as number}`] }, task: { type: "chief", index: 0 } }) };
    await writeFile(config, `module: ${job}\nplugins: [${plugin}]\ncheckpoint:\n  dir: ckpt\ncluster:\n  backend: relay\nlastStep: 5\nlogStepCountSteps: 0\n`);
    const refused = await cli(["run", config], env);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toContain("cluster.relayName: backend relay needs relayName");
    await writeFile(config, `module: ${job}\nplugins: [${plugin}]\ncheckpoint:\n  dir: ckpt\ncluster:\n  backend: relay\n  relayName: r1\nlastStep: 5\nlogStepCountSteps: 0\n`);
    const r = await cli(["run", config], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("registering with the coordination service (the relay r1): waiting for 1 task.");
    expect(r.stderr).toContain("coordination: relay)");
  });

  it("run: a second run on a checkpoint directory in use exits 2 with one line naming the holder, and writes nothing", async () => {
    const config = join(dir, "train.yaml");
    // No periodic save before the last step (the job trains some 30,000 steps a second: with a
    // cadence of 100,000 a loaded machine saw the first run save while the second one started).
    await writeFile(config, `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 1000000000\nlastStep: 100000000\nlogStepCountSteps: 0\n`);
    const ckpt = join(dir, "ckpt");
    // The checkpoint files: the first run's event files grow as it trains (the summaries share the directory).
    // Its goodput log grows too (its own check is below).
    const snapshot = (): Map<string, string> =>
      new Map(
        readdirSync(ckpt)
          .filter((f) => !f.startsWith("events.out.tfevents.") && f !== "goodput")
          .map((f) => [f, readFileSync(join(ckpt, f), "latin1")]),
      );
    const first = startCli(["run", config]);
    await first.waitFor("Starting at global step 0");
    const before = snapshot();
    const second = await cli(["run", config]);
    const after = snapshot();
    first.process.kill("SIGTERM");
    expect((await first.done).code).toBe(42);
    expect(second.code).toBe(2);
    expect(second.stdout).toBe("");
    expect(second.stderr).toMatch(
      new RegExp(`^${ckpt} is in use by pid ${first.process.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d; stop that process or use another checkpoint directory\\n$`),
    );
    // The first run saves only at its start: the directory is as the second run found it
    // (the lock file aside, whose lease the first run may have refreshed).
    expect([...before.keys()]).toContain("checkpoint.lock");
    before.delete("checkpoint.lock");
    after.delete("checkpoint.lock");
    expect([...after.keys()].sort(), [...after.keys()].join(", ")).toEqual([...before.keys()].sort());
    expect(after).toEqual(before);
    // The second run appended nothing to the first one's goodput log (it stopped at the lock).
    expect(readdirSync(join(ckpt, "goodput"))).toEqual(["local.jsonl"]);
    const goodput = readFileSync(join(ckpt, "goodput", "local.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { type: string; exitCode?: number });
    expect(goodput.filter((r) => r.type === "start")).toHaveLength(1);
    // The first run's SIGTERM: a notice, then its end with the preemption code.
    expect(goodput.filter((r) => r.type === "notice" || r.type === "end").map((r) => [r.type, r.exitCode])).toEqual([
      ["notice", undefined],
      ["end", 42],
    ]);
  });

  it("run: accounts for its time in <logdir>/goodput/local.jsonl and says its goodput at exit; `goodput <logdir>` recomputes it across restarts, as a table and as JSON", async () => {
    const config = join(dir, "train.yaml");
    const yaml = (lastStep: number): string => `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 10\nlastStep: ${lastStep}\nlogStepCountSteps: 0\n`;
    await writeFile(config, yaml(30));
    const first = await cli(["run", config]);
    expect(first.code, first.stderr).toBe(0);
    const ckpt = join(dir, "ckpt");
    expect(first.stderr).toMatch(new RegExp(`Goodput \\d+\\.\\d% of [\\d.]+s over 1 process \\(productive [\\d.]+s(; badput: [^)]*)?\\)\\. Every task: monitored-session goodput ${ckpt}\\n`));
    // The same command with a later last step: a second process of the task, appended to its log.
    await writeFile(config, yaml(60));
    const second = await cli(["run", config]);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toMatch(/Goodput \d+\.\d% of [\d.]+s over 2 processes /);
    const records = readFileSync(join(ckpt, "goodput", "local.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { type: string; step?: number | null; exitCode?: number | null; bucket?: string });
    expect(records.filter((r) => r.type === "start")).toHaveLength(2);
    expect(records.filter((r) => r.type === "ready").map((r) => r.step)).toEqual([0, 30]);
    expect(records.filter((r) => r.type === "end").map((r) => [r.step, r.exitCode])).toEqual([
      [30, 0],
      [60, 0],
    ]);
    // The second process restored model.ckpt-30; each process saved at its steps 0/10/20/30 (and 40/50/60).
    expect(records.filter((r) => r.type === "phase" && r.bucket === "restore")).toHaveLength(1);
    expect(records.filter((r) => r.type === "phase" && r.bucket === "checkpointSave").length).toBeGreaterThanOrEqual(7);

    // The chief's summaries: the group's goodput and every bucket, at its first summary and at each end (steps 30 and 60).
    const events = eventFiles(ckpt).flatMap((f) => readEvents(f));
    const stepsOf = (tag: string) => events.filter((e) => (e.summary?.value ?? []).some((v) => v.tag === tag)).map((e) => Number(e.step ?? 0));
    expect(stepsOf("goodput/fraction")).toContain(30);
    expect(stepsOf("goodput/fraction")).toContain(60);
    expect(stepsOf("badput/wastedProgress_secs")).toEqual(stepsOf("goodput/fraction"));
    expect(stepsOf("badput/startup_secs")).toEqual(stepsOf("goodput/fraction"));

    const table = await cli(["goodput", ckpt]);
    expect(table.code, table.stderr).toBe(0);
    const rows = table.stdout.trim().split("\n");
    expect(rows[0]).toMatch(/^task\s+processes\s+total\s+goodput\s+productive\s+startup\s+clusterJoin\s+restore\s+checkpointSave\s+preemption\s+collectiveWait\s+wastedProgress\s+infrastructureRecovery\s+other$/);
    expect(rows[1]).toMatch(/^local\s+2\s+/);
    expect(rows[2]).toMatch(/^group \(local\)\s+2\s+/);
    const json = await cli(["goodput", ckpt, "--json"]);
    expect(json.code, json.stderr).toBe(0);
    const run = JSON.parse(json.stdout) as { tasks: { task: string; processes: number; totalSecs: number; productiveSecs: number; badput: Record<string, number> }[]; group: { goodput: number } };
    expect(run.tasks.map((t) => [t.task, t.processes])).toEqual([["local", 2]]);
    const t = run.tasks[0] as (typeof run.tasks)[number];
    expect(t.productiveSecs + Object.values(t.badput).reduce((a, b) => a + b, 0)).toBeCloseTo(t.totalSecs, 6);
    expect(t.badput["restore"]).toBeGreaterThan(0);
    expect(run.group.goodput).toBeGreaterThan(0);
    expect(run.group.goodput).toBeLessThan(1);

    const none = await cli(["goodput", dir]);
    expect(none.code).toBe(2);
    expect(none.stderr).toBe(`monitored-session goodput: no goodput logs in ${dir}/goodput; \`monitored-session run\` writes them (a run of an older version wrote none)\n`);
    const missing = await cli(["goodput", join(dir, "nope")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/nope is not a directory; give the log directory of a run/);
  });

  it("run: a goodput log that cannot be opened is one warning naming the reason; training goes on and exits 0", async () => {
    const config = join(dir, "train.yaml");
    await writeFile(config, `module: ${job}\nsummaries:\n  dir: logs\nlastStep: 5\nlogStepCountSteps: 0\n`);
    // The log's folder is taken by a file.
    await mkdir(join(dir, "logs"));
    await writeFile(join(dir, "logs", "goodput"), "not a folder");
    const r = await cli(["run", config]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`WARN No goodput log for this run: .*${join(dir, "logs", "goodput").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
    expect(r.stderr.match(/No goodput log for this run/g)).toHaveLength(1);
    expect(r.stderr).toContain("Done at global step 5.");
    expect(r.stderr).not.toContain("Every task: monitored-session goodput");
  });

  it("run: a bad configuration exits 2, lists every problem, and creates nothing", async () => {
    const config = join(dir, "bad.yaml");
    await writeFile(
      config,
      `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSecs: 60\n  saveSteps: 10\nlastStp: 3\nhooks:\n  - type: LoggingTensorHook\n    tensors: [loss]\n    everyNSecs: -1\n`,
    );
    const r = await cli(["run", config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("3 problems:");
    expect(r.stderr).toContain("checkpoint: give only one of saveSecs and saveSteps (got saveSecs: 60, saveSteps: 10) (line 3, column 3)");
    expect(r.stderr).toMatch(/lastStp: unknown field "lastStp" \(did you mean "lastStep"\?\)/);
    expect(r.stderr).toContain("hooks[0].everyNSecs: expected a positive number, got -1 (line 10, column 17)");
    expect(existsSync(join(dir, "ckpt"))).toBe(false);
  });

  it("run: a module that is not a job exits 2 naming the problem; usage errors exit 2; --help exits 0 with the exit codes", async () => {
    const notJob = join(dir, "notjob.ts");
    await writeFile(notJob, "export default { fetches: 3 };\n");
    const config = join(dir, "c.json");
    await writeFile(config, JSON.stringify({ module: "./notjob.ts", checkpoint: { dir: "ckpt" } }));
    const r = await cli(["run", config]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("default.fetches: expected fetches");
    expect(r.stderr).toContain("default: a job needs one of graph, sessionFactory and scaffold");
    expect(existsSync(join(dir, "ckpt"))).toBe(false);

    // Usage errors and help: answered by the command line's parser (in this process).
    expect((await cliInProcess(["run"])).code).toBe(2);
    const bare = await cliInProcess([]);
    expect(bare.code).toBe(2);
    expect(bare.stdout + bare.stderr).toContain("Usage: monitored-session");
    expect((await cliInProcess(["frobnicate"])).code).toBe(2);
    const help = await cliInProcess(["run", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("42  preempted");
  });

  it("run: the npm start example job writes its loss and accuracy to TensorBoard at the summaries cadence", async () => {
    const config = join(dir, "example.yaml");
    const exampleJob = join(root, "examples/tfjs-classifier.job.ts");
    await writeFile(config, `module: ${exampleJob}\ncheckpoint: { dir: ckpt, saveSteps: 1000 }\nsummaries: { saveSteps: 2 }\nlogStepCountSteps: 0\nlastStep: 5\n`);
    const r = await cli(["run", config]);
    expect(r.code).toBe(0);
    const events = eventFiles(join(dir, "ckpt")).flatMap((f) => readEvents(f));
    const stepsOf = (tag: string) =>
      events.filter((e) => (e.summary?.value ?? []).some((v) => v.tag === tag)).map((e) => Number(e.step ?? 0));
    expect(stepsOf("loss")).toEqual([1, 3, 5]);
    expect(stepsOf("accuracy")).toEqual([1, 3, 5]);
  });

  it("inspect: flags a corrupt checkpoint and exits 1; a missing directory exits 2", async () => {
    const config = join(dir, "train.yaml");
    await writeFile(config, `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 5\nlastStep: 5\nlogStepCountSteps: 0\n`);
    expect((await cli(["run", config])).code).toBe(0);
    const data = join(dir, "ckpt", "model.ckpt-5.data-00000-of-00001");
    const at = (await TensorBundleReader.open(join(dir, "ckpt", "model.ckpt-5"))).entry("global_step")?.offset as number;
    const bytes = readFileSync(data);
    bytes[at] = (bytes[at] as number) ^ 0xff;
    await writeFile(data, bytes);
    // inspect in this process (the first test runs it as a command).
    const r = await cliInProcess(["inspect", join(dir, "ckpt")]);
    expect(r.code).toBe(1);
    // The flipped byte is the global step's: the step is unknown ("?"), not the number's 5.
    expect(r.stdout).toMatch(/model\.ckpt-5\s+\? .*CORRUPT: .*tensor "global_step": Checksum does not match/);
    expect(r.stdout).toMatch(/model\.ckpt-0\s+0 .*ok/);
    expect((await cliInProcess(["inspect", join(dir, "nope")])).code).toBe(2);

    // An unreadable index: the reader's message quotes the bytes; each report stays on one line.
    await writeFile(join(dir, "ckpt", "model.ckpt-9.index"), "xx\n\u0001\u0002yy");
    const garbled = await cliInProcess(["inspect", join(dir, "ckpt")]);
    expect(garbled.code).toBe(1);
    const lines = garbled.stdout.trim().split("\n");
    expect(lines.at(-1)).toBe("3 checkpoints, 2 failed verification.");
    expect(lines.filter((l) => /model\.ckpt-9\s/.test(l))).toHaveLength(1);
    expect(lines).toHaveLength(2 + 3 + 1);
    expect(garbled.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f]/);

    // A rerun falls back past the corrupt checkpoint, and its start line names the one it restored.
    await writeFile(config, `module: ${job}\ncheckpoint:\n  dir: ckpt\n  saveSteps: 5\nlastStep: 2\nlogStepCountSteps: 0\n`);
    const rerun = await cli(["run", config]);
    expect(rerun.stderr).toContain(`Starting at global step 0 (restored from ${join(dir, "ckpt", "model.ckpt-0")}); last step 2.`);
    expect(rerun.code).toBe(0);
  });
});
