/**
 * The generated JobSet's three pods (a chief and two workers of the bundled TensorFlow.js job,
 * short: test/kubernetes/fixtures/sim-job.yaml), simulated on this machine by
 * jobSetSimulator.ts: each pod a real `run` process with exactly the pod's environment from the
 * manifest, its own network namespace on a shared bridge (every task listens on the manifest's
 * port at `0.0.0.0`, on an address of its own), its hostname, its peers' DNS names resolving
 * to their addresses, and its volumes where the pod spec mounts them (the checkpoint claim on
 * the chief only). A driver applies the manifest's own failure policy to the exit codes, as the
 * Job and JobSet controllers would.
 *
 * Waits are on the pods' own output and exits, each with a deadline; the tasks train with no
 * delay between steps, and no assertion depends on how fast they do. Skipped, with a message,
 * where network namespaces cannot be made (not root, no iproute2).
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";

import { useTempDirs } from "../util/tempDirs.js";
import { checkpointAfter, JobSetDriver, jobSetOfManifest, latestCheckpoint, outputs, SIM_BASE, simulationUnavailable, until, useJobSetDrivers, type RunningSet, type SimJobSet } from "./jobSetSimulator.js";

if (simulationUnavailable !== undefined) console.warn(`[skip] multi-pod simulation: network namespaces are not permitted here (${simulationUnavailable})`);

const tempDir = useTempDirs("ms-multi-pod-sim-", SIM_BASE);
const TASKS = ["chief:0", "worker:0", "worker:1"];
const WORKERS = TASKS.filter((t) => t.startsWith("worker"));
const LAST_STEP = 3000;

const driverOf = useJobSetDrivers();

const simulation = async (): Promise<{ set: SimJobSet; driver: JobSetDriver }> => {
  const set = await jobSetOfManifest({ config: "test/kubernetes/fixtures/sim-job.yaml", workers: TASKS.length, maxRestarts: 1, dir: tempDir() });
  const driver = driverOf(set);
  return { set, driver };
};

/** The step each task logged it starts at, by task. */
const startSteps = (running: RunningSet): Map<string, number> =>
  new Map(running.pods.map((p) => [p.pod.task, Number(/Starting at global step (\d+)/.exec(p.output())?.[1])]));

describe.skipIf(simulationUnavailable !== undefined)("the generated JobSet's chief and two workers, simulated as pods", () => {
  it("train to the end: every task finds its place from the pod's environment, all exit 0, the set succeeds", { timeout: 420_000 }, async () => {
    const { set, driver } = await simulation();
    expect(set.pods.map((p) => p.task)).toEqual(TASKS);
    const running = driver.start();
    const outcome = await driver.settle(running);
    expect(outcome.action, outputs(running)).toBe("succeeded");
    expect([...outcome.codes.values()]).toEqual([0, 0, 0]);
    const port = ((set.pods[0]?.container["ports"] as { containerPort: number }[])[0] as { containerPort: number }).containerPort;
    const chief = set.pods[0]?.dnsName as string;
    for (const [rank, task] of TASKS.entries()) {
      const out = running.pod(task).output();
      expect(out, task).toContain(`task ${task} (${task === "chief:0" ? "chief" : "worker"})`);
      // Every pod on the manifest's port at 0.0.0.0 (cluster.bindAddress), in its own network
      // namespace; each reached the chief's coordination service at the chief pod's DNS name.
      expect(out, task).toContain(`(bound 0.0.0.0:${port})`);
      expect(out, task).toContain(`hosted by the chief at grpc://${chief}:${port}`);
      // One replica group over the bridge: each rank reached the others at their pods' names.
      expect(out, task).toContain(`Data-parallel training: rank ${rank} of 3`);
      expect(out, task).toMatch(new RegExp(`Done at global step ${LAST_STEP}\\.`));
    }
    expect(latestCheckpoint(set)).toBe(`model.ckpt-${LAST_STEP}`);
    // The workers wrote nothing: the chief's claim is the only place checkpoints went, and the
    // workers' own volumes (the checkpoint directory's parent, an emptyDir each) stayed empty.
    for (const pod of running.pods.filter((p) => p.pod.replicatedJob === "worker")) {
      const volumes = readdirSync(join(set.podsDir, pod.name), { withFileTypes: true }).filter((d) => d.isDirectory() && d.name.startsWith("scratch-"));
      expect(volumes.length).toBeGreaterThan(0);
      for (const v of volumes) expect(readdirSync(join(set.podsDir, pod.name, v.name)), `${pod.pod.task} ${v.name}`).toEqual([]);
    }
  });

  it("SIGTERM to a worker, SIGKILL after the grace period: every task stops at one agreed step, the chief saves it, all exit 42, an uncounted restart resumes there; SIGKILL of a worker: a counted restart from the chief's last checkpoint", { timeout: 900_000 }, async () => {
    const { set, driver } = await simulation();

    // 1. A worker's pod deleted (SIGTERM, SIGKILL after terminationGracePeriodSeconds) once
    //    training is under way.
    const first = driver.start();
    await until(first.pod("chief:0"), /Checkpoint saved: .*\(global step 500,/);
    const evicted = first.pod("worker:1");
    const evictedCode = driver.delete(evicted);
    const preempted = await driver.settle(first);
    expect(await evictedCode, evicted.output()).toBe(42);
    expect(Object.fromEntries(preempted.codes), outputs(first)).toEqual({ "chief:0": 42, "worker:0": 42, "worker:1": 42 });
    expect(preempted.action).toBe("restartUncounted");
    expect(preempted.failed?.message).toMatch(/failed with exit code 42 matching FailJob rule/);
    // One step for all: the chief's preemption checkpoint and each worker's stop.
    const saved = /Preemption checkpoint for step (\d+) saved: (\S+)\./.exec(first.pod("chief:0").output());
    expect(saved, outputs(first)).not.toBeNull();
    const step = Number(saved?.[1]);
    expect(step).toBeGreaterThanOrEqual(500);
    expect(saved?.[2]).toBe(join(set.checkpointDir, `model.ckpt-${step}`));
    for (const task of WORKERS) expect(first.pod(task).output(), task).toContain(`at global step ${step}, where the replica group stopped`);
    expect(latestCheckpoint(set)).toBe(`model.ckpt-${step}`);
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 1, counted: 0 });

    // 2. The new pods (restart attempt 1) resume at that step, every task.
    const second = driver.start();
    expect(second.restartAttempt).toBe(1);
    for (const task of TASKS) await until(second.pod(task), /Starting at global step \d+/);
    expect(Object.fromEntries(startSteps(second)), outputs(second)).toEqual({ "chief:0": step, "worker:0": step, "worker:1": step });
    expect(second.pod("chief:0").output()).toContain(`(restored from ${join(set.checkpointDir, `model.ckpt-${step}`)})`);

    // 3. A worker SIGKILLed (a crash, an OOM kill: no preemption) after the next periodic save.
    const periodic = await until(second.pod("chief:0"), checkpointAfter(step));
    second.pod("worker:0").child.kill("SIGKILL");
    const crashed = await driver.settle(second);
    expect(crashed.failed?.pod.pod.task, outputs(second)).toBe("worker:0");
    expect(crashed.failed?.code).toBe(137);
    expect(crashed.failed?.reason).toBe("BackoffLimitExceeded");
    expect(crashed.action).toBe("restartCounted");
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 2, counted: 1 });
    // The chief's last checkpoint: the periodic one, or a later one if the restart's SIGTERM
    // reached the chief after a completed step.
    const last = latestCheckpoint(set);
    const lastStep = Number(/model\.ckpt-(\d+)$/.exec(last ?? "")?.[1]);
    expect(lastStep, outputs(second)).toBeGreaterThanOrEqual(periodic);

    // 4. The third set resumes from it, every task, and trains to the end.
    const third = driver.start();
    const done = await driver.settle(third);
    expect(done.action, outputs(third)).toBe("succeeded");
    expect(Object.fromEntries(startSteps(third))).toEqual({ "chief:0": lastStep, "worker:0": lastStep, "worker:1": lastStep });
    expect(third.pod("chief:0").output()).toContain(`(restored from ${join(set.checkpointDir, last as string)})`);
    for (const task of TASKS) expect(third.pod(task).output(), task).toMatch(new RegExp(`Done at global step ${LAST_STEP}\\.`));
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 2, counted: 1 });
  });

  it("an eviction the pod cannot answer in time (frozen, SIGKILLed after the grace period: exit 137 with DisruptionTarget): the set restarts without using up a restart and resumes from the chief's last checkpoint", { timeout: 600_000 }, async () => {
    const { set, driver } = await simulation();
    const first = driver.start();
    await until(first.pod("chief:0"), /Checkpoint saved: .*\(global step 500,/);
    // Frozen (a stuck kernel, a swapped-out node): the SIGTERM waits, the SIGKILL ends it.
    const evicted = first.pod("worker:1");
    evicted.child.kill("SIGSTOP");
    const evictedCode = driver.evict(evicted);
    const outcome = await driver.settle(first);
    expect(await evictedCode, evicted.output()).toBe(137);
    expect(outcome.failed?.pod.pod.task, outputs(first)).toBe("worker:1");
    expect(outcome.failed?.message).toMatch(/has condition DisruptionTarget matching FailJob rule/);
    // Without the condition, exit 137 is a counted failure (the SIGKILL test above).
    expect(outcome.action).toBe("restartUncounted");
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 1, counted: 0 });
    const last = latestCheckpoint(set);
    const lastStep = Number(/model\.ckpt-(\d+)$/.exec(last ?? "")?.[1]);
    expect(lastStep, outputs(first)).toBeGreaterThanOrEqual(500);

    // The new pods resume there, every task.
    const second = driver.start();
    for (const task of TASKS) await until(second.pod(task), /Starting at global step \d+/);
    expect(Object.fromEntries(startSteps(second)), outputs(second)).toEqual({ "chief:0": lastStep, "worker:0": lastStep, "worker:1": lastStep });
    expect(second.pod("chief:0").output()).toContain(`(restored from ${join(set.checkpointDir, last as string)})`);
  });

  it("a configuration error: exit 2, the set fails at once, with no restart", { timeout: 300_000 }, async () => {
    const { set, driver } = await simulation();
    // The ConfigMap of an edited file with an error the manifest command does not check.
    const [cmName, data] = [...set.configMaps.entries()][0] as [string, Record<string, string>];
    const [key, text] = Object.entries(data)[0] as [string, string];
    const doc = parseDocument(text);
    doc.set("lastStep", -3);
    set.configMaps.set(cmName, { [key]: doc.toString() });
    const running = driver.start();
    const outcome = await driver.settle(running);
    expect(outcome.action, outputs(running)).toBe("failed");
    expect(outcome.failed?.code).toBe(2);
    expect(outcome.failed?.message).toMatch(/failed with exit code 2 matching FailJob rule/);
    expect(outcome.failed?.pod.output()).toMatch(/lastStep/);
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 0, counted: 0 });
    expect(latestCheckpoint(set)).toBeUndefined();
  });
});
