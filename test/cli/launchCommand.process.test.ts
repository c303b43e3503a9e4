/**
 * `monitored-session launch -- <command> [args…]` with real processes: launch runs any command,
 * as torchrun runs a script. The commands are plain Node scripts of test/fixtures/cli:
 * launch-task.mjs prints what launch gave it (TF_CONFIG, MONITORED_SESSION_CLUSTER,
 * MONITORED_SESSION_LAUNCH_READY) and exits as its plan says; trap-sigterm.mjs is a program that
 * never starts a monitored-session task and exits 42 from its SIGTERM trap. Each test acts when a
 * line appears, never after a fixed time, and every wait has a generous deadline.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { cliInProcess } from "../util/cli.js";
import { killLaunchTree, repoRoot, startCli, type CliChild } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-launch-command-");
const launchTask = join(repoRoot, "test/fixtures/cli/launch-task.mjs");
const trapSigterm = join(repoRoot, "test/fixtures/cli/trap-sigterm.mjs");
const statusTask = join(repoRoot, "test/fixtures/cli/status-task.mjs");

/** Every launch started by a test, with the task pids it printed: all killed after the test. */
const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});

/** Starts `launch <launchArgs> -- <command>` (cwd: the repository root). */
const launch = (launchArgs: readonly string[], command: readonly string[]): CliChild => {
  const run = startCli(["launch", ...launchArgs, "--", ...command], { timeoutMs: 150_000 });
  launched.push(run);
  return run;
};

/** `launch-task.mjs` as the command, with `plan` (task → exit code, "wait", or one per start). */
const taskCommand = (plan: Record<string, unknown> = {}, stateDir = tempDir()): string[] => [process.execPath, launchTask, JSON.stringify(plan), stateDir];

/** What a launch-task.mjs task printed. */
interface TaskReport {
  readonly task: string;
  readonly start: number;
  readonly tfConfig: string | null;
  readonly clusterSettings: string | null;
  readonly launchReady: string | null;
}

/** The reports of launch-task.mjs in `stdout`, each with the prefix launch gave its line. */
const reportsOf = (stdout: string): { prefix: string; report: TaskReport }[] =>
  [...stdout.matchAll(/^\[([^\]]+)\] (\{.*\})$/gm)].map((m) => ({ prefix: m[1] as string, report: JSON.parse(m[2] as string) as TaskReport }));

/** The cluster settings every task got; fails unless all got the same. */
const settingsOf = (stdout: string, tasks: number): unknown => {
  const reports = reportsOf(stdout);
  expect(reports, stdout).toHaveLength(tasks);
  const texts = new Set(reports.map((r) => r.report.clusterSettings));
  expect(texts.size, stdout).toBe(1);
  return JSON.parse([...texts][0] as string);
};

const lines = (text: string): string[] => text.split("\n").filter((l) => l !== "");

// A launch is one Node loading tsx (seconds on a busy machine) and N plain Node scripts.
describe("monitored-session launch -- <command>", { timeout: 160_000 }, () => {
  it("--workers 3: each task runs the command with its own TF_CONFIG (one cluster of distinct loopback ports, its own task), MONITORED_SESSION_LAUNCH_READY=1 and the settings from the flags", async () => {
    const r = await launch(
      ["--workers", "3", "--backend", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379,http://127.0.0.1:2380", "--etcd-prefix", "jobs/a/", "--token-file", "secrets/token", "--heartbeat-timeout", "5", "--collective-timeout", "30"],
      taskCommand(),
    ).done;
    expect(r.code, r.stderr).toBe(0);
    const reports = reportsOf(r.stdout);
    expect(reports.map((x) => x.prefix).sort(), r.stdout).toEqual(["chief:0", "worker:0", "worker:1"]);
    const configs = reports.map(({ prefix, report }) => ({ prefix, config: JSON.parse(report.tfConfig as string) as { cluster: Record<string, string[]>; task: { type: string; index: number } } }));
    for (const { prefix, config } of configs) expect(`${config.task.type}:${config.task.index}`).toBe(prefix);
    const cluster = configs[0]?.config.cluster;
    for (const { config } of configs) expect(config.cluster).toEqual(cluster);
    expect(cluster?.["chief"]).toHaveLength(1);
    expect(cluster?.["worker"]).toHaveLength(2);
    const addresses = [...(cluster?.["chief"] ?? []), ...(cluster?.["worker"] ?? [])];
    for (const a of addresses) expect(a).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(new Set(addresses).size).toBe(3);
    for (const { report } of reports) expect(report.launchReady).toBe("1");
    expect(settingsOf(r.stdout, 3)).toEqual({
      backend: "etcd",
      etcdEndpoints: ["http://127.0.0.1:2379", "http://127.0.0.1:2380"],
      etcdPrefix: "jobs/a/",
      // Relative to launch's working directory.
      tokenFile: join(repoRoot, "secrets/token"),
      timeouts: { heartbeatTimeoutSecs: 5 },
      collectiveTimeoutSecs: 30,
    });
    expect(r.stderr).toContain("[launch] every task exited 0");
  });

  it.each([
    [
      "cluster.yaml",
      "backend: etcd\netcdEndpoints: [http://10.0.0.1:2379]\ntokenFile: token\ntls:\n  certFile: tls/cert.pem\n  keyFile: tls/key.pem\ntimeouts:\n  heartbeatTimeoutSecs: 8\n  barrierTimeoutSecs: 100\n",
    ],
    [
      "cluster.json",
      JSON.stringify({
        backend: "etcd",
        etcdEndpoints: ["http://10.0.0.1:2379"],
        tokenFile: "token",
        tls: { certFile: "tls/cert.pem", keyFile: "tls/key.pem" },
        timeouts: { heartbeatTimeoutSecs: 8, barrierTimeoutSecs: 100 },
      }),
    ],
  ])("--cluster-config %s: every task gets the file's settings, its paths against its directory, and the flags override its keys (theirs against the working directory)", async (name, content) => {
    const dir = tempDir();
    const file = join(dir, name);
    writeFileSync(file, content);
    const r = await launch(["--workers", "2", "--cluster-config", file, "--etcd-endpoints", "http://127.0.0.1:2379", "--heartbeat-timeout", "4", "--tls-ca", "ca.pem"], taskCommand()).done;
    expect(r.code, r.stderr).toBe(0);
    expect(settingsOf(r.stdout, 2)).toEqual({
      backend: "etcd",
      etcdEndpoints: ["http://127.0.0.1:2379"],
      tokenFile: join(dir, "token"),
      tls: { certFile: join(dir, "tls/cert.pem"), keyFile: join(dir, "tls/key.pem"), caFile: join(repoRoot, "ca.pem") },
      timeouts: { heartbeatTimeoutSecs: 4, barrierTimeoutSecs: 100 },
    });
  });

  it("without settings flags every task gets an empty section (the defaults: the embedded backend)", async () => {
    const r = await launch(["--workers", "1"], taskCommand()).done;
    expect(r.code, r.stderr).toBe(0);
    expect(settingsOf(r.stdout, 1)).toEqual({});
  });

  it("a task exits 42 and the others 0: launch exits 42", async () => {
    const r = await launch(["--workers", "3"], taskCommand({ "worker:0": 42 })).done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("[launch] worker:0 exited with 42");
    for (const task of ["chief:0", "worker:1"]) expect(r.stderr).toContain(`[launch] ${task} exited with 0`);
  });

  it("a task exits 3: the others (still running) are stopped with SIGTERM, and launch exits 3", async () => {
    const r = await launch(["--workers", "3"], taskCommand({ "chief:0": "wait", "worker:0": 3, "worker:1": "wait" })).done;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/\[launch\] worker:0 failed \(exit 3\): stopping (chief:0, worker:1|worker:1, chief:0) \(SIGTERM, SIGKILL after 30 s\)/);
    // Not a monitored-session task: Node's default action for SIGTERM, at once.
    for (const task of ["chief:0", "worker:1"]) expect(r.stderr).toContain(`[launch] ${task} exited with 143 (killed by SIGTERM)`);
    expect(r.stderr).toContain("[launch] worker:0 exited with 3: exiting with 3");
  });

  it("--max-restarts 1: a group whose chief fails is started again on the same addresses (the same TF_CONFIG), and launch exits 0 when every task of the restart does", async () => {
    const r = await launch(["--workers", "2", "--max-restarts", "1"], taskCommand({ "chief:0": [3, 0] })).done;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain("[launch] chief:0 exited with 3: restarting the group (restart 1 of 1)");
    const chiefStarts = reportsOf(r.stdout).filter((x) => x.prefix === "chief:0");
    expect(chiefStarts.map((x) => x.report.start)).toEqual([1, 2]);
    expect(chiefStarts[1]?.report.tfConfig).toBe(chiefStarts[0]?.report.tfConfig);
    expect(r.stderr).toContain("[launch] every task exited 0");
  });

  it("--max-restarts 2 and a command that always fails: three starts, then launch exits with its code", async () => {
    const r = await launch(["--workers", "1", "--max-restarts", "2"], taskCommand({ "chief:0": 5 })).done;
    expect(r.code, r.stderr).toBe(5);
    expect(reportsOf(r.stdout).map((x) => x.report.start)).toEqual([1, 2, 3]);
    expect(r.stderr).toContain("[launch] chief:0 exited with 5: exiting with 5 after 2 restarts");
  });

  it.each([
    ["never prints launch's readiness line", []],
    ["prints the readiness line (as the library's task does)", ["--print-ready"]],
  ])("SIGTERM to launch reaches a command that %s: it exits 42 from its trap, and launch exits 42", async (_, extra) => {
    const run = launch(["--workers", "2", "--max-restarts", "1"], [process.execPath, trapSigterm, ...extra]);
    for (const task of ["chief:0", "worker:0"]) await run.waitFor(`[${task}] trapping SIGTERM`, 120_000);
    run.process.kill("SIGTERM");
    const r = await run.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toContain("[launch] SIGTERM: forwarding SIGTERM to ");
    for (const task of ["chief:0", "worker:0"]) {
      expect(r.stdout).toContain(`[${task}] got SIGTERM: exiting with 42`);
      expect(r.stderr).toContain(`[launch] ${task} exited with 42`);
    }
    expect(r.stderr).not.toContain("restarting");
    // The readiness line is launch's, never the command's output.
    expect(r.stderr).not.toContain("signal handlers ready");
  });

  it("a command that cannot be started (no such file): every task 'could not start', launch exits 1 (after its restarts) without hanging", async () => {
    const missing = join(tempDir(), "no-such-command");
    const r = await launch(["--workers", "2", "--max-restarts", "1"], [missing, "--flag"]).done;
    expect(r.code, r.stderr).toBe(1);
    for (const task of ["chief:0", "worker:0"]) expect(r.stderr).toContain(`[launch] ${task} could not start: spawn ${missing} ENOENT`);
    expect(r.stderr).toContain("exiting with 1 after 1 restart");
  });

  it("bad cluster settings exit 2 with one line per problem, starting nothing (a real process)", async () => {
    const r = await launch(["--workers", "2", "--backend", "nope", "--heartbeat-timeout", "soon"], taskCommand()).done;
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r.stderr)).toEqual([
      'monitored-session launch: --backend: expected "embedded", "etcd" or "memory", got "nope"',
      'monitored-session launch: --heartbeat-timeout: expected a positive number, got "soon"',
    ]);
    expect(r.stdout).toBe("");
  });

  describe("usage errors: exit 2 with one line, starting nothing", () => {
    // Parsed and checked before anything starts: `main` in this process (the entry point's exit 2
    // is the real-process test above).
    const bad = async (args: readonly string[]): Promise<string> => {
      const r = await cliInProcess(["launch", ...args]);
      expect(r.code, r.stderr).toBe(2);
      expect(lines(r.stderr), r.stderr).toHaveLength(1);
      return r.stderr;
    };
    const command = (): string[] => ["--", ...taskCommand()];

    it.each([
      [["--backend", "nope"], /^monitored-session launch: --backend: expected "embedded", "etcd" or "memory", got "nope"$/m],
      [
        ["--backend", "memory"],
        /^monitored-session launch: cluster\.backend memory keeps the coordination state in this process, and launch starts each of the 2 tasks in a process of its own: use embedded or etcd, or start the tasks with startTask\(\) in one program$/m,
      ],
      [["--backend", "memory", "--etcd-prefix", "jobs/a/"], /^monitored-session launch: --etcd-prefix: is only used with backend: etcd \(the backend is memory\); remove it or set backend: etcd$/m],
      [["--etcd-endpoints", "http://127.0.0.1:2379"], /^monitored-session launch: --etcd-endpoints: is only used with backend: etcd \(the backend is embedded\); remove it or set backend: etcd$/m],
      [["--backend", "etcd"], /^monitored-session launch: --etcd-endpoints: backend etcd needs at least one endpoint/m],
      [["--backend", "etcd", "--etcd-endpoints", "ftp://127.0.0.1:2379"], /^monitored-session launch: --etcd-endpoints: expected an http:\/\/ or https:\/\/ URL/m],
      [["--heartbeat-timeout", "0"], /^monitored-session launch: --heartbeat-timeout: expected a positive number, got 0$/m],
      [["--collective-timeout", "soon"], /^monitored-session launch: --collective-timeout: expected a positive number, got "soon"$/m],
      [["--tls-cert", "cert.pem"], /^monitored-session launch: --tls-key: is required/m],
      [["--verbose"], /^monitored-session launch: --verbose is passed to each task's run \(<config> only\); after --, give your command its own flags$/m],
    ])("%j", async (args, message) => {
      expect(await bad(["--workers", "2", ...args, ...command()])).toMatch(message);
    });

    it("a configuration whose backend keeps its tasks in one process: refused once, before any task starts", async () => {
      expect(await bad(["--workers", "2", "test/fixtures/cli/memory-backend.yaml"])).toBe(
        "monitored-session launch: test/fixtures/cli/memory-backend.yaml: cluster.backend memory keeps the coordination state in this process, and launch starts each of the 2 tasks in a process of its own: use embedded or etcd, or start the tasks with startTask() in one program\n",
      );
    });

    it("no command after --", async () => {
      expect(await bad(["--workers", "2", "--"])).toBe("monitored-session launch: no command after --; give one: launch --workers <n> -- <command> [args...]\n");
    });

    it("a configuration file and a command", async () => {
      expect(await bad(["--workers", "2", "job.yaml", ...command()])).toMatch(/^monitored-session launch: give either <config> or -- <command> \[args\.\.\.\], not both/);
    });

    it.each([
      [["--backend", "etcd"], "--backend is"],
      [["--token-file", "token", "--cluster-config", "cluster.yaml"], "--token-file, --cluster-config are"],
    ])("settings flags %j in the config form: put them in the configuration's cluster: section", async (args, named) => {
      const config = join(tempDir(), "job.yaml");
      writeFileSync(config, "module: ./job.ts\n");
      expect(await bad(["--workers", "2", ...args, config])).toBe(
        `monitored-session launch: ${named} for launch -- <command>; with a configuration file, put the settings in its cluster: section (${config})\n`,
      );
    });

    it("a --cluster-config file that does not exist", async () => {
      const missing = join(tempDir(), "cluster.yaml");
      expect(await bad(["--workers", "2", "--cluster-config", missing, ...command()])).toMatch(`--cluster-config ${missing} does not exist`);
    });

    it("a --cluster-config file with a bad key names the file and the key; one wrapped in cluster: says to move its keys up", async () => {
      const dir = tempDir();
      const file = join(dir, "cluster.yaml");
      writeFileSync(file, "timeouts:\n  heartbeatTimeoutSecs: -1\n");
      expect(await bad(["--workers", "2", "--cluster-config", file, ...command()])).toBe(
        `monitored-session launch: ${file}: timeouts.heartbeatTimeoutSecs: expected a positive number, got -1\n`,
      );
      const wrapped = join(dir, "wrapped.json");
      writeFileSync(wrapped, JSON.stringify({ cluster: { backend: "etcd" } }));
      expect(await bad(["--workers", "2", "--cluster-config", wrapped, ...command()])).toMatch(/cluster: the file holds the cluster: section's content, its keys at top level/);
    });
  });
  it("a task that said on its status channel that it exits is not SIGKILLed when a peer then finds its service gone: it exits with its own code", async () => {
    const r = await launch(["--workers", "2"], [process.execPath, statusTask, tempDir()]).done;
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain("[launch] chief:0 exited with 1");
    expect(r.stderr).not.toMatch(/is lost|SIGKILL$/m);
  });
});
