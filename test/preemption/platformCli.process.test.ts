/**
 * `monitored-session run` with `preemption.platform`: an AWS spot notice from a fake instance
 * metadata service on loopback (reached through AWS_EC2_METADATA_SERVICE_ENDPOINT) preempts a
 * real training run, which saves and exits 42; a bad Kubernetes grace period is a usage error.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { isLeft, isRight } from "fp-ts/lib/Either.js";

import { decodeConfig, formatIssue } from "../../src/config/index.js";
import { linearJob } from "../util/cli.js";
import { startCli } from "../util/cliChild.js";
import { useTempDirs } from "../util/tempDirs.js";
import { startFakeMetadataServer, type FakeMetadataServer } from "./platforms/fakeMetadataServer.js";

const tempDir = useTempDirs("ms-platform-cli-");

const config = (dir: string, platform: string): string => {
  const file = join(dir, "job.yaml");
  writeFileSync(file, `module: ${linearJob}\ncheckpoint:\n  dir: ck\n  saveSecs: 600\npreemption:\n  platform: ${platform}\nlastStep: 100000000\nlogStepCountSteps: 0\n`);
  return file;
};

let server: FakeMetadataServer;
beforeEach(async () => {
  server = await startFakeMetadataServer();
});
afterEach(() => server.close());

describe("monitored-session run with preemption.platform", () => {
  it("aws: the spot instance-action notice saves a checkpoint and exits 42", async () => {
    let noticeOn = false;
    server.route((r) => {
      if (r.method === "PUT" && r.url === "/latest/api/token") return { status: 200, body: "token-1" };
      if (r.url !== "/latest/meta-data/spot/instance-action" || r.headers["x-aws-ec2-metadata-token"] !== "token-1") return { status: 401 };
      return noticeOn ? { status: 200, body: JSON.stringify({ action: "terminate", time: new Date(Date.now() + 120_000).toISOString() }) } : { status: 404 };
    });
    const dir = tempDir();
    const child = startCli(["run", config(dir, "aws")], { env: { AWS_EC2_METADATA_SERVICE_ENDPOINT: server.baseUrl }, timeoutMs: 60_000 });
    await child.waitFor(/^step \d+\//m);
    noticeOn = true;
    const r = await child.done;
    expect(r.code, r.stderr).toBe(42);
    expect(r.stderr).toMatch(/termination notice \(aws: spot instance-action "terminate" at /);
    expect(r.stderr).toMatch(/Preemption checkpoint for step \d+ saved/);
    expect(server.requests.some((q) => q.method === "PUT")).toBe(true);
  });

  it("kubernetes: a grace period that is not a number is a usage error (exit 2) naming the variable", async () => {
    const dir = tempDir();
    const r = await startCli(["run", config(dir, "kubernetes")], { env: { TERMINATION_GRACE_PERIOD_SECONDS: "thirty" } }).done;
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("preemption.platform: TERMINATION_GRACE_PERIOD_SECONDS must be a number of seconds");
  });

  it("the configuration takes the six platform values, signals by default, and names the choices for another", () => {
    for (const platform of ["signals", "auto", "gce", "aws", "azure", "kubernetes"]) {
      expect(isRight(decodeConfig({ module: "./m.js", checkpoint: { dir: "ck" }, preemption: { platform } }))).toBe(true);
    }
    const bad = decodeConfig({ module: "./m.js", preemption: { platform: "ec2" } });
    expect(isLeft(bad) && bad.left.map(formatIssue)).toEqual([expect.stringMatching(/preemption\.platform.*"signals", "auto", "gce", "aws", "azure" or "kubernetes"/)]);
  });
});
