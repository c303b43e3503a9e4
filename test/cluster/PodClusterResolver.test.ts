import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";

import { decodePodEnvironment, PeerNotResolvedError, POD_ENV, podTfConfig, resolvePodCluster, waitForPodTfConfig } from "../../src/cluster/PodClusterResolver.js";
import { ValueError } from "../../src/errors.js";
import { startTask } from "../../src/runtime/index.js";
import { VirtualClock } from "../../src/testing/index.js";

/** The environment of pod `index` of replicated job `job` in the JobSet `mnist` of 3 training tasks. */
const jobSetPod = (job: string, index: number, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({
  [POD_ENV.mode]: "jobset",
  [POD_ENV.setName]: "mnist",
  [POD_ENV.replicatedJob]: job,
  [POD_ENV.jobIndex]: "0",
  [POD_ENV.restartAttempt]: "1",
  [POD_ENV.completionIndex]: String(index),
  [POD_ENV.subdomain]: "mnist",
  [POD_ENV.namespace]: "team-a",
  [POD_ENV.workers]: "3",
  [POD_ENV.port]: "2222",
  ...extra,
});

const indexedPod = (index: number): NodeJS.ProcessEnv => ({
  [POD_ENV.mode]: "indexed-job",
  [POD_ENV.setName]: "mnist",
  [POD_ENV.completionIndex]: String(index),
  [POD_ENV.subdomain]: "mnist",
  [POD_ENV.namespace]: "default",
  [POD_ENV.workers]: "3",
  [POD_ENV.port]: "2222",
});

const cluster = {
  chief: ["mnist-chief-0-0.mnist.team-a.svc:2222"],
  worker: ["mnist-worker-0-0.mnist.team-a.svc:2222", "mnist-worker-0-1.mnist.team-a.svc:2222"],
};

/** A DNS where `names` resolve, each from the virtual time given (ms); others never. */
const fakeDns = (clock: VirtualClock, names: Record<string, number>) => {
  const asked: string[] = [];
  const lookup = async (name: string): Promise<unknown> => {
    asked.push(name);
    const from = names[name];
    if (from === undefined || clock.now() < from) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: "ENOTFOUND" });
    return { address: "10.0.0.1", family: 4 };
  };
  return { lookup, asked };
};

/** Drives the virtual clock until `p` settles. */
const settle = async <T>(clock: VirtualClock, p: Promise<T>): Promise<T> => {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 10_000 && !done; i++) await clock.advance(250);
  return p;
};

describe("the cluster from the pod's environment", () => {
  it("a JobSet pod: the cluster at the pods' DNS names, its task from the replicated job and completion index", () => {
    expect(podTfConfig(jobSetPod("worker", 1))).toEqual({ cluster, task: { type: "worker", index: 1 }, environment: "cloud" });
    expect(podTfConfig(jobSetPod("chief", 0))?.task).toEqual({ type: "chief", index: 0 });
    const pod = decodePodEnvironment(jobSetPod("worker", 0));
    expect(isRight(pod) && pod.right?.restartAttempt).toBe(1);
  });

  it("an indexed Job's pod: index 0 is the chief, index i worker i-1, at <job>-<index>", () => {
    expect(podTfConfig(indexedPod(0))).toEqual({
      cluster: { chief: ["mnist-0.mnist.default.svc:2222"], worker: ["mnist-1.mnist.default.svc:2222", "mnist-2.mnist.default.svc:2222"] },
      task: { type: "chief", index: 0 },
      environment: "cloud",
    });
    expect(podTfConfig(indexedPod(2))?.task).toEqual({ type: "worker", index: 1 });
  });

  it("one training task: a cluster of the chief alone", () => {
    expect(podTfConfig({ ...jobSetPod("chief", 0), [POD_ENV.workers]: "1" })?.cluster).toEqual({ chief: ["mnist-chief-0-0.mnist.team-a.svc:2222"] });
  });

  it("TF_CONFIG, when set, wins; without either there is no cluster", () => {
    const tfConfig = { cluster: { worker: ["a:1", "b:1"] }, task: { type: "worker", index: 1 } };
    expect(podTfConfig({ ...jobSetPod("chief", 0), TF_CONFIG: JSON.stringify(tfConfig) })).toEqual(tfConfig);
    expect(podTfConfig({ PATH: "/usr/bin" })).toBeUndefined();
  });

  it("a bad environment names every variable at fault", () => {
    const r = decodePodEnvironment({ ...jobSetPod("worker", 0), [POD_ENV.port]: "http", [POD_ENV.namespace]: undefined, [POD_ENV.setName]: "MNIST" });
    expect(isLeft(r) && r.left.map((i) => i.path).sort()).toEqual([POD_ENV.namespace, POD_ENV.port, POD_ENV.setName].sort());
    expect(() => podTfConfig(jobSetPod("ps", 0))).toThrow(new ValueError(`invalid pod environment: ${POD_ENV.replicatedJob}: expected "chief" or "worker", got "ps"`));
    expect(() => podTfConfig(jobSetPod("worker", 2))).toThrow(/JOB_COMPLETION_INDEX: 2 is not a task of job "worker" \(it has 2\)/);
    expect(() => podTfConfig(indexedPod(3))).toThrow(/JOB_COMPLETION_INDEX: 3 is not below MONITORED_SESSION_POD_WORKERS \(3\)/);
    expect(() => podTfConfig({ [POD_ENV.mode]: "statefulset" })).toThrow(/MONITORED_SESSION_POD_MODE: expected "jobset" or "indexed-job", got "statefulset"/);
  });
});

describe("waiting for the peers' DNS names (virtual clock, fake DNS)", () => {
  it("waits for each peer not yet resolvable, with one line naming it, then resolves the task", async () => {
    const clock = new VirtualClock();
    const t0 = clock.now();
    const dns = fakeDns(clock, { "mnist-chief-0-0.mnist.team-a.svc": t0 + 5_000, "mnist-worker-0-1.mnist.team-a.svc": t0 });
    const lines: string[] = [];
    const resolved = await settle(clock, resolvePodCluster({ env: jobSetPod("worker", 0), lookup: dns.lookup, clock, log: (l) => lines.push(l) }));
    expect(resolved).toMatchObject({ taskType: "worker", taskIndex: 0, isChief: false, numWorkers: 3, idInCluster: 1 });
    expect(lines).toEqual([
      expect.stringMatching(/^This pod is task worker:0 of 3 in JobSet mnist( \(restart attempt \d+\))?, from the pod's environment\.$/),
      expect.stringMatching(/^Waiting for the peer task's DNS name mnist-chief-0-0\.mnist\.team-a\.svc to resolve \(.*up to 600 s more\)\.$/),
    ]);
    // Its own name is never waited for; the chief was asked until it resolved, once a second.
    expect(new Set(dns.asked)).toEqual(new Set(["mnist-chief-0-0.mnist.team-a.svc", "mnist-worker-0-1.mnist.team-a.svc"]));
    expect(dns.asked.filter((n) => n.startsWith("mnist-chief")).length).toBe(6);
    expect(clock.now() - t0).toBeGreaterThanOrEqual(5_000);
  });

  it("a peer that never resolves fails at the deadline, naming it", async () => {
    const clock = new VirtualClock();
    const dns = fakeDns(clock, { "mnist-worker-0-0.mnist.team-a.svc": 0 });
    const lines: string[] = [];
    const waiting = waitForPodTfConfig({ env: jobSetPod("chief", 0, { [POD_ENV.dnsTimeoutSecs]: "30" }), lookup: dns.lookup, clock, log: (l) => lines.push(l) });
    await expect(settle(clock, waiting)).rejects.toThrow(new PeerNotResolvedError("mnist-worker-0-1.mnist.team-a.svc", 30));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^This pod is task chief:0 of \d+ in JobSet mnist/);
    expect(lines[1]).toContain("mnist-worker-0-1.mnist.team-a.svc");
  });

  it("TF_CONFIG set: no DNS is asked", async () => {
    const clock = new VirtualClock();
    const dns = fakeDns(clock, {});
    const tfConfig = { cluster: { chief: ["a:1"] }, task: { type: "chief", index: 0 } };
    await expect(waitForPodTfConfig({ env: { ...jobSetPod("chief", 0), TF_CONFIG: JSON.stringify(tfConfig) }, lookup: dns.lookup, clock })).resolves.toEqual(tfConfig);
    expect(dns.asked).toEqual([]);
  });

  it("startTask() reads the pod's environment when TF_CONFIG is unset", async () => {
    await expect(startTask({ env: { [POD_ENV.mode]: "jobset" } })).rejects.toThrow(/^invalid pod environment: MONITORED_SESSION_POD_SET: .* \(set by the manifest; or set TF_CONFIG instead\)$/);
    await expect(startTask({ env: {} })).rejects.toThrow(/TF_CONFIG is not set.*monitored-session manifest kubernetes/);
  });
});
