/**
 * examples/preemption-custom-loop.ts at its start (child processes): a configuration or
 * cluster-start error is one line and exit 2, as docs/preemption.md asks programs to do, on the
 * wasm backend the example selects first. (Its preemption is tested through
 * test/fixtures/preemption/customLoop.ts, in test/runtime/preemptionProcesses.process.test.ts.)
 */
import { createServer, type AddressInfo, type Server } from "node:net";

import { afterEach, describe, expect, it } from "vitest";

import { spawnResult, type Result } from "../util/cli.js";

const EXAMPLE = "examples/preemption-custom-loop.ts";

/** The example as its header says to run it on one machine, with `env` over this one's (TF_CONFIG removed). */
const example = (env: Record<string, string>): Promise<Result> => {
  const { TF_CONFIG: _, ...inherited } = process.env;
  return spawnResult(process.execPath, ["--import", "tsx", EXAMPLE], { env: { ...inherited, ...env }, timeoutMs: 60_000 });
};

const lines = (s: string): string[] => s.split("\n").filter((l) => l !== "");

const held: Server[] = [];
afterEach(async () => {
  for (const s of held.splice(0)) await new Promise((done) => s.close(done));
});

describe("examples/preemption-custom-loop.ts: errors at start exit 2 with one line", () => {
  it("TF_CONFIG that is not JSON", async () => {
    const r = await example({ TF_CONFIG: "{" });
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r.stderr)).toEqual([expect.stringMatching(/^TfConfigError: invalid TF_CONFIG: \(root\): not valid JSON/)]);
    expect(r.stdout).toBe("");
  });

  it("no TF_CONFIG: the line says to run it under launch", async () => {
    const r = await example({});
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r.stderr)).toEqual([expect.stringMatching(/^ValueError: startTask: TF_CONFIG is not set.*monitored-session launch --workers N -- <command>/)]);
  });

  it("the task's port is in use (ClusterStartError)", async () => {
    const server = createServer();
    held.push(server);
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    const r = await example({ TF_CONFIG: JSON.stringify({ cluster: { chief: [address] }, task: { type: "chief", index: 0 } }) });
    expect(r.code, r.stderr).toBe(2);
    expect(lines(r.stderr)).toEqual([expect.stringMatching(new RegExp(`^ClusterStartError: .*${address} is already in use`))]);
  });
});
