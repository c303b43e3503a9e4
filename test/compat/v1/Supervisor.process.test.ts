import { readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { useTempDirs } from "../../util/tempDirs.js";
import { runFixture } from "../../util/runFixture.js";

const tempDir = useTempDirs("sv-test-");

describe("Supervisor daemon semantics", () => {
  it("a program that leaves the standard services running exits on its own (the services are daemons)", async () => {
    const logdir = tempDir();
    const run = await runFixture("test/fixtures/daemon/services.ts", ["supervisor", logdir]);
    expect(run.killed, `the child did not exit by itself; output:\n${run.output}`).toBe(false);
    expect(run.code).toBe(0);
    expect(run.output).toContain("supervisor services started");
    // The services' first iterations ran: a checkpoint and the event file are there.
    expect(readdirSync(logdir)).toEqual(expect.arrayContaining([expect.stringMatching(/^model\.ckpt-\d+\.index$/), expect.stringContaining("tfevents")]));
  });
});
