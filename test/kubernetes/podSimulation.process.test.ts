/**
 * A local simulation of the generated JobSet's chief pod alone (`--workers 1`), by
 * jobSetSimulator.ts: `run` as a real child process with exactly the environment the manifest
 * gives the pod (the Downward API's values filled in as JobSet labels its pods), the manifest's
 * command and working directory, the ConfigMap's text at its mount path, the checkpoint claim,
 * the pod's hostname, its own network namespace and its DNS name resolving to its address. A
 * small driver applies the manifest's own failure policy to the exit codes, as the Job and
 * JobSet controllers would. multiPodSimulation.process.test.ts runs a chief and two workers the
 * same way.
 * Skipped, with a message, where network namespaces cannot be made.
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";

import { useTempDirs } from "../util/tempDirs.js";
import { checkpointAfter, JobSetDriver, jobSetOfManifest, latestCheckpoint, outputs, SIM_BASE, simulationUnavailable, until, useJobSetDrivers } from "./jobSetSimulator.js";

if (simulationUnavailable !== undefined) console.warn(`[skip] pod simulation: network namespaces are not permitted here (${simulationUnavailable})`);

const tempDir = useTempDirs("ms-pod-sim-", SIM_BASE);

const driverOf = useJobSetDrivers();

const chiefAlone = async (): Promise<JobSetDriver> => {
  const set = await jobSetOfManifest({ config: "test/kubernetes/fixtures/sim-job.yaml", workers: 1, maxRestarts: 1, dir: tempDir() });
  const driver = driverOf(set);
  return driver;
};

describe.skipIf(simulationUnavailable !== undefined)("the generated JobSet's chief pod, simulated", () => {
  it("trains to the end: the set succeeds", { timeout: 120_000 }, async () => {
    const driver = await chiefAlone();
    expect(driver.set.pods.map((p) => p.task)).toEqual(["chief:0"]);
    const running = driver.start();
    const outcome = await driver.settle(running);
    expect(outcome.action, outputs(running)).toBe("succeeded");
    // The task found itself in the pod's environment, at its DNS name.
    expect(running.pod("chief:0").output()).toContain(`task chief:0 (chief)`);
    expect(running.pod("chief:0").output()).toMatch(/Done at global step 3000\./);
  });

  it("SIGTERM: saved and exit 42, restarted without counting, resumed at that step; SIGKILL: a counted restart from the last checkpoint", { timeout: 240_000 }, async () => {
    const driver = await chiefAlone();
    const set = driver.set;
    const first = driver.start();
    const chief1 = first.pod("chief:0");
    await until(chief1, /Checkpoint saved: .*\(global step 500,/);
    void driver.delete(chief1);
    const preempted = await driver.settle(first);
    expect(preempted.failed?.code, chief1.output()).toBe(42);
    expect(preempted.action).toBe("restartUncounted");
    const saved = Number(/Preemption checkpoint for step (\d+) saved/.exec(chief1.output())?.[1]);
    expect(saved).toBeGreaterThanOrEqual(500);

    const second = driver.start();
    const chief2 = second.pod("chief:0");
    await until(chief2, /Starting at global step/);
    expect(chief2.output()).toMatch(new RegExp(`Starting at global step ${saved} \\(restored from .*model\\.ckpt-${saved}\\)`));
    const periodic = await until(chief2, checkpointAfter(saved));
    chief2.child.kill("SIGKILL");
    const crashed = await driver.settle(second);
    expect(crashed.failed?.code).toBe(137);
    expect(crashed.action).toBe("restartCounted");
    expect(driver.countedRestarts).toBeLessThanOrEqual(set.failurePolicy.maxRestarts);
    const last = latestCheckpoint(set);

    const third = driver.start();
    const done = await driver.settle(third);
    expect(done.action, outputs(third)).toBe("succeeded");
    const resumed = Number(/Starting at global step (\d+)/.exec(third.pod("chief:0").output())?.[1]);
    // From the last checkpoint the killed pod wrote (a later one may have landed before the kill).
    expect(`model.ckpt-${resumed}`).toBe(last);
    expect(resumed).toBeGreaterThanOrEqual(periodic);
    expect(third.pod("chief:0").output()).toContain(`(restored from ${join(set.checkpointDir, `model.ckpt-${resumed}`)})`);
    expect({ restarts: driver.restarts, counted: driver.countedRestarts }).toEqual({ restarts: 2, counted: 1 });
  });

  it("a configuration error: exit 2, the set fails at once", { timeout: 120_000 }, async () => {
    const driver = await chiefAlone();
    const [cmName, data] = [...driver.set.configMaps.entries()][0] as [string, Record<string, string>];
    const [key, text] = Object.entries(data)[0] as [string, string];
    const doc = parseDocument(text);
    doc.set("lastStep", -3);
    driver.set.configMaps.set(cmName, { [key]: doc.toString() });
    const running = driver.start();
    const outcome = await driver.settle(running);
    expect(outcome.failed?.code, outputs(running)).toBe(2);
    expect(outcome.action).toBe("failed");
    expect(driver.restarts).toBe(0);
  });
});
