import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { ExitCodes } from "../../src/runtime/exitCodes.js";
import { MIN_JOBSET_VERSION } from "../../src/kubernetes/failurePolicy.js";
import { DEFAULT_SAVE_SECS, KUBERNETES_DEFAULT_GRACE_SECS, SAVE_MARGIN, terminationGracePeriod } from "../../src/kubernetes/gracePeriod.js";
import { CHIEF_LOST_EXIT_CODE } from "../../src/preemption/index.js";
import { jobSetSchema } from "./manifestChecks.js";

const docs = readFileSync(new URL("../../docs/kubernetes.md", import.meta.url), "utf8");

describe("docs/kubernetes.md's exit-code table", () => {
  it("has a row for every exit code of the command and the chief-lost code", () => {
    const table = docs.slice(docs.indexOf("## Exit codes and what Kubernetes does"), docs.indexOf("## A checkpoint directory"));
    const rows = table.split("\n").filter((l) => /^\| \d/.test(l)).map((l) => l.split("|")[1]?.trim());
    for (const code of [...Object.values(ExitCodes), CHIEF_LOST_EXIT_CODE]) expect(rows).toContain(String(code));
  });

  it("states the JobSet version the failure rules need, which the CRD schema of the fixture has", () => {
    expect(docs).toContain(`JobSet **${MIN_JOBSET_VERSION}** or later`);
    const at = (o: unknown, ...keys: string[]): unknown => keys.reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], o);
    const rule = at(jobSetSchema, "properties", "spec", "properties", "failurePolicy", "properties", "rules", "items", "properties") as Record<string, unknown>;
    expect(Object.keys(rule)).toEqual(expect.arrayContaining(["onJobFailureMessagePatterns", "onJobFailureReasons", "action", "name"]));
  });
});

describe("terminationGracePeriod", () => {
  it("save × margin + heartbeat timeout + preemption grace, rounded up, never under Kubernetes' default", () => {
    expect(terminationGracePeriod({ saveSecs: 20, heartbeatTimeoutSecs: 10, preemptionGracePeriodSecs: 60 }).seconds).toBe(Math.ceil(20 * SAVE_MARGIN + 10 + 60));
    expect(terminationGracePeriod({ saveSecs: 0.4, heartbeatTimeoutSecs: 3 }).seconds).toBe(KUBERNETES_DEFAULT_GRACE_SECS);
    expect(terminationGracePeriod({ saveSecs: 13.3, heartbeatTimeoutSecs: 10 }).seconds).toBe(30);
    expect(terminationGracePeriod({ saveSecs: 14, heartbeatTimeoutSecs: 10 }).seconds).toBe(31);
  });

  it("says where the save time came from", () => {
    expect(terminationGracePeriod({}).explanation).toBe(
      `assumed ${DEFAULT_SAVE_SECS} s save (measure it: --save-secs) × 1.5 + 10 s agreement allowance (heartbeat timeout) + 0 s preemption.gracePeriodSecs = 25 s, raised to Kubernetes' default of 30 s`,
    );
    expect(terminationGracePeriod({ saveSecs: 40 }).explanation).toBe("40 s measured save × 1.5 + 10 s agreement allowance (heartbeat timeout) + 0 s preemption.gracePeriodSecs = 70 s");
  });
});
