/**
 * `monitored-session launch` with real processes: a local cluster of `run` tasks on loopback
 * (test/fixtures/cli/cluster-job.ts reads its task from TF_CONFIG and exits 0, 1 or 42 as the
 * test's plan says). Each test acts when a line appears, never after a fixed time, and asserts
 * outcomes and named tasks only.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { resolveTfConfig } from "../../src/cluster/ClusterResolver.js";
import { decodeTfConfig } from "../../src/cluster/TfConfig.js";
import { tasksOf, tfConfigsOf } from "../../src/cli/launch.js";
import { cliInProcess } from "../util/cli.js";
import { alive, killLaunchTree, launchedTaskPids, repoRoot, startCli, type CliChild, type CliRun } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-launch-");
const clusterJob = join(repoRoot, "test/fixtures/cli/cluster-job.ts");

/** Every launch started by a test, with the task pids it printed: all killed after the test. */
const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});

/** A config running the cluster job in `dir`; `extra` is appended (more top-level keys). */
const config = (dir: string, extra = ""): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${clusterJob}\nlogStepCountSteps: 0\n${extra}`);
  return file;
};

type Plan = Record<string, string | string[]>;

/** Starts `launch <args>` on a new config in a new directory, the tasks behaving as `plan` says. */
const launch = (args: readonly string[], plan: Plan = {}, extra = ""): { run: CliChild; dir: string } => {
  const dir = tempDir();
  const run = startCli(["launch", "--no-standby", ...args, config(dir, extra)], { env: { CLUSTER_TEST_PLAN: JSON.stringify(plan), CLUSTER_TEST_DIR: dir }, timeoutMs: 170_000 });
  launched.push(run);
  return { run, dir };
};

const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

describe("launch's TF_CONFIGs", () => {
  it("--workers 3 is a chief job of 1 and a worker job of 2 on distinct loopback ports, and each task resolves to itself", () => {
    const tasks = tasksOf(3);
    expect(tasks.map((t) => t.name)).toEqual(["chief:0", "worker:0", "worker:1"]);
    const configs = tfConfigsOf(tasks, ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"]).map((text) => {
      const r = decodeTfConfig(text);
      if (r._tag === "Left") throw new Error(JSON.stringify(r.left));
      return resolveTfConfig(r.right);
    });
    expect(configs.map((c) => [c.taskType, c.taskIndex, c.isChief, c.numWorkers])).toEqual([
      ["chief", 0, true, 3],
      ["worker", 0, false, 3],
      ["worker", 1, false, 3],
    ]);
    expect(configs[0]?.clusterSpec.asDict()).toEqual({ chief: ["127.0.0.1:1001"], worker: ["127.0.0.1:1002", "127.0.0.1:1003"] });
  });

  it("--workers 1 is a chief alone (no worker job)", () => {
    const [text] = tfConfigsOf(tasksOf(1), ["127.0.0.1:1001"]);
    expect(JSON.parse(text as string)).toEqual({ cluster: { chief: ["127.0.0.1:1001"] }, task: { type: "chief", index: 0 } });
  });
});

// A group start is a few node processes loading tsx (seconds each on a busy machine); a restart
// test starts three groups in a row.
describe("monitored-session launch", { timeout: 180_000 }, () => {
  it("every task exits 0: exit 0, and every line of every task carries its task's prefix", async () => {
    const { run } = launch(["--workers", "3"]);
    const r = await run.done;
    expect(r.code, r.stderr).toBe(0);
    for (const task of ["chief:0", "worker:0", "worker:1"]) expect(r.stdout).toContain(`[${task}] task ${task} up`);
    for (const line of lines(r.stdout)) expect(line).toMatch(/^\[(chief:0|worker:[01])\] /);
    for (const line of lines(r.stderr)) expect(line).toMatch(/^\[(chief:0|worker:[01]|launch)\] /);
    expect(r.stderr).toContain("[launch] every task exited 0");
  });

  it("--log-format json: every line of launch and of its tasks is one JSON object naming its task; a task's own lines (not JSON) become its info records", async () => {
    const { run } = launch(["--workers", "2", "--log-format", "json"]);
    const r = await run.done;
    expect(r.code, r.stderr).toBe(0);
    const records = [...lines(r.stdout), ...lines(r.stderr)].map((l) => JSON.parse(l) as Record<string, unknown>);
    for (const rec of records) expect(["launch", "chief:0", "worker:0"]).toContain(rec["task"]);
    // The job's console.log, and run's own log records (run got --log-format json).
    expect(records).toContainEqual(expect.objectContaining({ task: "worker:0", level: "info", message: expect.stringMatching(/^task worker:0 up /) as unknown }));
    expect(records).toContainEqual(expect.objectContaining({ task: "chief:0", level: "info", message: expect.stringMatching(/^Cluster task chief:0, the chief of 2 training tasks/) as unknown }));
    expect(records).toContainEqual(expect.objectContaining({ task: "launch", level: "info", message: "every task exited 0" }));
    expect(records.filter((rec) => rec["task"] !== "launch" && rec["type"] === "progress").length).toBeGreaterThan(0);
  });

  it("a task fails: the others stop too (on its reported error, naming it, or on launch's SIGTERM) and launch exits with the failure's code, 1", async () => {
    const { run } = launch(["--workers", "3"], { "chief:0": "train", "worker:0": "fail", "worker:1": "train" });
    const r = await run.done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain("[worker:0] Training failed: Error: task worker:0 fails on purpose");
    for (const task of ["chief:0", "worker:1"]) {
      // Whichever comes first: the error worker:0 reported to the cluster, or the chief's service
      // gone with the chief (exit 1), or launch's SIGTERM (exit 42). A worker that took launch's
      // SIGTERM as a notice and then lost the chief (exited 1) before the chief's save exits 43:
      // nobody could save.
      const exit = new RegExp(`\\[launch\\] ${task} exited with (1|42|43)`).exec(r.stderr);
      expect(exit, r.stderr).not.toBeNull();
      if (exit?.[1] === "1") expect(r.stderr).toMatch(new RegExp(`\\[${task}\\] Training failed: (UnknownError: task worker:0 failed: Error: task worker:0 fails on purpose \\(reported by task /job:worker/replica:0/task:0\\)|UnavailableError: )`));
      if (exit?.[1] === "43") {
        expect(task, r.stderr).not.toBe("chief:0");
        expect(r.stderr).toContain(`[${task}] ERROR Preempted (SIGTERM), and the chief was lost meanwhile`);
      }
    }
    expect(r.stderr).toMatch(/\[launch\] (chief:0|worker:[01]) exited with 1: exiting with 1/);
  });

  it("a task is preempted (exits 42) before any other fails: its claim reaches the others through the coordination service, every task exits 42, and launch exits 42", async () => {
    const { run } = launch(["--workers", "2"], { "chief:0": "train", "worker:0": "preempt" });
    const r = await run.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("[worker:0] INFO Preempted (SIGTERM): a worker exits with 42 without saving (the chief saves).");
    expect(r.stderr).toContain("[chief:0] INFO PreemptionCheckpointHandler: worker:0 got a termination notice; chief:0 saves at its next step boundary.");
    expect(r.stderr).toMatch(/\[chief:0\] INFO Preempted \((SIGTERM|worker:0's termination notice)\)/);
    expect(r.stderr).toContain("[launch] worker:0 exited with 42");
    expect(r.stderr).toContain("[launch] chief:0 exited with 42");
  });

  it("a task is preempted and another does not stop on its notice (hung): launch gives it --kill-after seconds, then SIGTERM, then SIGKILL --kill-after seconds later; launch exits 42", async () => {
    // The chief tells the others of its notice for up to three heartbeat timeouts before it exits.
    const { run } = launch(["--workers", "2", "--kill-after", "1"], { "chief:0": "preempt", "worker:0": "hang" }, "cluster:\n  timeouts:\n    heartbeatTimeoutSecs: 2\n");
    const r = await run.done;
    expect(r.code, r.stderr).toBe(42);
    const said = lines(r.stderr).filter((l) => l.startsWith("[launch] "));
    const at = (line: string): number => said.indexOf(line);
    const order = [
      "[launch] chief:0 exited with 42",
      "[launch] chief:0 was preempted (exit 42): worker:0 stops on its notice (SIGTERM after 1 s if not)",
      "[launch] worker:0 still running 1 s after chief:0's preemption: stopping worker:0 (SIGTERM, SIGKILL after 1 s)",
      "[launch] worker:0 still running after 1 s: SIGKILL",
      "[launch] worker:0 exited with 137 (killed by SIGKILL)",
    ].map(at);
    expect(order.every((i) => i >= 0), said.join("\n")).toBe(true);
    expect([...order].sort((a, b) => a - b), said.join("\n")).toEqual(order);
  });

  it("a stopped task that does not exit is SIGKILLed after --kill-after; the failure still decides the exit code", async () => {
    const { run } = launch(["--workers", "2", "--kill-after", "1"], { "chief:0": "hang", "worker:0": "fail" });
    const r = await run.done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain("[chief:0] hanging");
    // SIGKILLed after --kill-after, or at once when the worker found the hung chief's service lost first.
    expect(r.stderr).toMatch(/^\[launch\] chief:0 (still running after 1 s|is lost: the coordination service it hosts stopped answering \(worker:0 says so\)): SIGKILL$/m);
    expect(r.stderr).toContain("[launch] chief:0 exited with 137 (killed by SIGKILL)");
  });

  it("--max-restarts 1: a failing task is restarted with the whole group, and a preemption does not use up the restart (preempt, then fail, then every task exits 0)", async () => {
    const { run } = launch(["--workers", "2", "--max-restarts", "1"], { "chief:0": ["train", "train", "ok"], "worker:0": ["preempt", "fail", "ok"] });
    const r = await run.done;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/\[launch\] preempted \((worker|chief):0 exited with 42\): restarting the group \(a preemption does not use up a restart; 1 left\)/);
    // worker:0 failed; the chief, stopping on its reported error, may exit first.
    expect(r.stderr).toMatch(/\[launch\] (worker|chief):0 exited with 1: restarting the group \(restart 1 of 1\)/);
    expect(r.stderr).toContain("[worker:0] Training failed: Error: task worker:0 fails on purpose");
    // After the failure the whole group is restarted, and every task of it exits 0.
    expect(r.stdout).toContain("[chief:0] task chief:0 up (start 3: ok)");
    expect(r.stdout).toContain("[worker:0] task worker:0 up (start 3: ok)");
    expect(r.stderr).toContain("[launch] every task exited 0");
    // --no-standby (this file's launches): every restart started new processes, no standby was made.
    expect(`${r.stdout}${r.stderr}`).not.toMatch(/standby/);
  });

  it("after --max-restarts restarts, launch exits with the last failure's code", async () => {
    // A group of one (the chief alone): three starts of one task instead of two (the restart of a
    // failed worker with its group is the test above's).
    const { run } = launch(["--workers", "1", "--max-restarts", "2"], { "chief:0": "fail" });
    const r = await run.done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain("restart 2 of 2");
    expect(r.stdout).toContain("[chief:0] task chief:0 up (start 3: fail)");
    expect(r.stderr).toContain("[launch] chief:0 exited with 1: exiting with 1 after 2 restarts");
  });

  it.each(["SIGTERM", "SIGINT"] as const)("%s to launch is forwarded to every task: each exits 42, launch exits 42 and restarts nothing", async (signal) => {
    const { run } = launch(["--workers", "3", "--max-restarts", "2"], { "chief:0": "train", "worker:0": "train", "worker:1": "train" });
    // A group start is seconds per task on a busy machine: a deadline far above it (the test's is 180 s).
    for (const task of ["chief:0", "worker:0", "worker:1"]) await run.waitFor(`[${task}] training`, 90_000);
    run.process.kill(signal);
    const r: CliRun = await run.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toMatch(new RegExp(`\\[launch\\] ${signal}: forwarding ${signal} to `));
    for (const task of ["chief:0", "worker:0", "worker:1"]) {
      // Its own forwarded signal, or another task's claim, whichever reaches it first: both end in 42.
      expect(r.stderr).toMatch(new RegExp(`\\[${task}\\] INFO Preempted \\((${signal}|(chief|worker):\\d+'s termination notice)\\)`));
      expect(r.stderr).toContain(`[launch] ${task} exited with 42`);
    }
    expect(r.stderr).not.toContain("restarting");
  });

  it("SIGTERM to launch while its tasks are still starting: each task gets it once it handles signals and exits 42 (never Node's 143)", async () => {
    const { run } = launch(["--workers", "2"], { "chief:0": "train", "worker:0": "train" });
    // Right after launch has spawned both: their Node is still loading.
    await run.waitFor("[launch] started worker:0");
    run.process.kill("SIGTERM");
    const r: CliRun = await run.done;
    expect(r.code, r.stderr).toBe(42);
    for (const task of ["chief:0", "worker:0"]) expect(r.stderr).toContain(`[launch] ${task} exited with 42`);
    expect(r.stderr).not.toContain("killed by SIGTERM");
    // The tasks' readiness lines are launch's, not the user's.
    expect(r.stderr).not.toContain("signal handlers ready");
  });

  it("launch killed with SIGKILL: its tasks notice their parent's death and exit (no orphans)", async () => {
    const { run } = launch(["--workers", "2"], { "chief:0": "train", "worker:0": "train" });
    for (const task of ["chief:0", "worker:0"]) await run.waitFor(`[${task}] training`, 90_000);
    const pids = launchedTaskPids(run.output());
    expect(pids).toHaveLength(2);
    run.process.kill("SIGKILL");
    await run.done;
    const deadline = Date.now() + 30_000; // the tasks poll their parent every second
    while (pids.some(alive)) {
      if (Date.now() > deadline) throw new Error(`tasks still alive after their launcher died: ${pids.filter(alive).join(", ")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  });

  it.each([
    [["--workers", "0"], /--workers <n>.*expected an integer >= 1/],
    [["--workers", "1.5"], /--workers <n>.*expected an integer >= 1/],
    [["--workers", "two"], /--workers <n>.*expected an integer >= 1/],
    [["--workers", "2", "--max-restarts", "-1"], /--max-restarts <k>.*expected an integer >= 0/],
    [["--workers", "2", "--kill-after", "0"], /--kill-after <secs>.*expected a positive number of seconds/],
    [[], /required option '--workers <n>'/],
  ])("bad arguments %j exit 2 with one line", async (args, message) => {
    // Parsed before anything starts: the command's own code, in this process (the entry point's
    // exit with the command's 2 is the next test's, in a real process).
    const r = await cliInProcess(["launch", ...args, config(tempDir())]);
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r.stderr), r.stderr).toHaveLength(1);
    expect(r.stderr).toMatch(message);
  });

  it("a missing config exits 2 with one line, starting nothing", async () => {
    // A usage error (in this process, as above); then the entry point's exit 2 in a real process.
    const r = await cliInProcess(["launch", "--workers", "2"]);
    expect(r.code).toBe(2);
    expect(lines(r.stderr), r.stderr).toEqual(["error: missing required argument 'config'"]);

    const absent = join(tempDir(), "nope.yaml");
    const nofile = startCli(["launch", "--workers", "2", absent]);
    launched.push(nofile);
    const r2 = await nofile.done;
    expect(r2.code).toBe(2);
    expect(lines(r2.stderr)).toEqual([`monitored-session launch: the configuration file ${absent} does not exist`]);
  });
});
