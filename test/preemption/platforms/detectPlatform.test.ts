/** detectPlatform and createPlatformWatcher: local evidence only (files under an injected root, an injected env). */

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { ValueError } from "../../../src/errors.js";
import { createPlatformWatcher, detectPlatform, kubernetesWatcher, PLATFORM_EVIDENCE_FILES } from "../../../src/preemption/index.js";
import { EventRecorder } from "../../../src/testing/index.js";
import { useTempDirs } from "../../util/tempDirs.js";

const tempDir = useTempDirs();

const root = (files: Partial<Record<keyof typeof PLATFORM_EVIDENCE_FILES, string>>): string => {
  const dir = tempDir();
  for (const [k, v] of Object.entries(files)) {
    const p = join(dir, PLATFORM_EVIDENCE_FILES[k as keyof typeof PLATFORM_EVIDENCE_FILES]);
    mkdirSync(join(p, ".."), { recursive: true });
    writeFileSync(p, `${v}\n`);
  }
  return dir;
};

describe("detectPlatform", () => {
  it("recognizes each platform from its firmware strings", () => {
    expect(detectPlatform({ root: root({ sysVendor: "Google", productName: "Google Compute Engine" }), env: {} })?.platform).toBe("gce");
    expect(detectPlatform({ root: root({ productName: "Google Compute Engine" }), env: {} })?.platform).toBe("gce");
    expect(detectPlatform({ root: root({ sysVendor: "Amazon EC2", productName: "m5.large" }), env: {} })?.platform).toBe("aws");
    expect(detectPlatform({ root: root({ hypervisorUuid: "ec2e1916-9099-7caf-fd21-012345abcdef" }), env: {} })).toEqual({
      platform: "aws",
      evidence: "the Xen hypervisor UUID starts with ec2",
    });
    expect(detectPlatform({ root: root({ sysVendor: "Microsoft Corporation", chassisAssetTag: "7783-7084-3265-9085-8269-3286-77" }), env: {} })?.platform).toBe("azure");
  });

  it("a Kubernetes pod is kubernetes even on a cloud VM", () => {
    expect(detectPlatform({ root: root({ sysVendor: "Google" }), env: { KUBERNETES_SERVICE_HOST: "10.0.0.1" } })?.platform).toBe("kubernetes");
  });

  it("nothing known (a laptop, Hyper-V outside Azure, no files at all) is undefined", () => {
    expect(detectPlatform({ root: root({ sysVendor: "LENOVO", productName: "20XW" }), env: {} })).toBeUndefined();
    expect(detectPlatform({ root: root({ sysVendor: "Microsoft Corporation", productName: "Virtual Machine" }), env: {} })).toBeUndefined();
    expect(detectPlatform({ root: tempDir(), env: { KUBERNETES_SERVICE_HOST: "" } })).toBeUndefined();
  });
});

describe("createPlatformWatcher", () => {
  it("signals is no watcher; auto without evidence is none, logged", () => {
    const events = new EventRecorder();
    const logger = events.logger();
    expect(createPlatformWatcher("signals", { logger })).toBeUndefined();
    expect(createPlatformWatcher("auto", { root: tempDir(), env: {}, logger })).toBeUndefined();
    expect(events.messages()).toEqual([expect.stringContaining("no cloud platform recognized")]);
  });

  it("auto picks the detected platform; explicit names make their watcher", () => {
    const events = new EventRecorder();
    const logger = events.logger();
    expect(createPlatformWatcher("auto", { root: root({ sysVendor: "Amazon EC2" }), env: {}, logger })?.platform).toBe("aws");
    expect(events.messages()[0]).toContain("aws (sys_vendor is \"Amazon EC2\")");
    for (const p of ["gce", "aws", "azure"] as const) expect(createPlatformWatcher(p, { env: {} })?.check).toBeTypeOf("function");
    expect(createPlatformWatcher("kubernetes", { env: { TERMINATION_GRACE_PERIOD_SECONDS: "45" } })).toEqual({ platform: "kubernetes", signalGraceSecs: 45 });
  });
});

describe("createPlatformWatcher's line for auto", () => {
  it("names the detected platform and its evidence, once, at info", () => {
    const events = new EventRecorder();
    const logger = events.logger();
    expect(createPlatformWatcher("auto", { root: root({ hypervisorUuid: "EC2E1916-9099-7CAF-FD21-012345ABCDEF" }), env: {}, logger })?.platform).toBe("aws");
    expect(createPlatformWatcher("auto", { root: root({ productName: "Google Compute Engine" }), env: {}, logger })?.platform).toBe("gce");
    expect(createPlatformWatcher("auto", { root: tempDir(), env: { KUBERNETES_SERVICE_HOST: "10.0.0.1" }, logger })?.platform).toBe("kubernetes");
    expect(events.lines()).toEqual([
      { type: "log", time: 0, level: "info", message: "preemption.platform auto: aws (the Xen hypervisor UUID starts with ec2)." },
      { type: "log", time: 0, level: "info", message: 'preemption.platform auto: gce (product_name is "Google Compute Engine").' },
      { type: "log", time: 0, level: "info", message: "preemption.platform auto: kubernetes (KUBERNETES_SERVICE_HOST is set)." },
    ]);
  });
});

describe("kubernetesWatcher", () => {
  it("reads the grace period from the environment; without it SIGTERM has no deadline", () => {
    expect(kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "30" } }).signalGraceSecs).toBe(30);
    expect(kubernetesWatcher({ env: {} }).signalGraceSecs).toBeUndefined();
    expect(kubernetesWatcher({ terminationGracePeriodSecs: 90, env: { TERMINATION_GRACE_PERIOD_SECONDS: "30" } }).signalGraceSecs).toBe(90);
    expect(kubernetesWatcher({ env: {} }).check).toBeUndefined();
  });

  it("a bad value is a clear error", () => {
    expect(() => kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "30s" } })).toThrow(ValueError);
    expect(() => kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "-1" } })).toThrow(/terminationGracePeriodSeconds/);
  });
});
