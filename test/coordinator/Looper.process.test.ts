import { describe, expect, it } from "vitest";
import { runFixture } from "../util/runFixture.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// LooperTest
// ---------------------------------------------------------------------------------------------

describe("Looper daemon semantics (TensorFlow's LooperThread is a daemon)", () => {
  it("a waiting looper on the real clock does not keep the process alive (a child exits on its own)", async () => {
    const run = await runFixture("test/fixtures/daemon/services.ts", ["looper"]);
    expect(run.killed, `the child did not exit by itself; output:\n${run.output}`).toBe(false);
    expect(run.code).toBe(0);
    expect(run.output).toContain("looper ran once");
  });
});
