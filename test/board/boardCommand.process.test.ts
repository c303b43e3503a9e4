import { describe, expect, it } from "vitest";

import { cli } from "../util/cli.js";
import { logdirWithOneRun, runsOnceLoaded } from "./boardCommand.testHelpers.js";

describe("monitored-session board: serves until SIGINT/SIGTERM, then exits 0", () => {
  it("child process: a real SIGINT closes the server and exits 0", async () => {
    const logdir = await logdirWithOneRun();
    let url = "";
    let served = "";
    const r = await cli(["board", logdir, "--port", "0", "--token", "t0k"], {}, (child) => {
      child.stdout?.on("data", (d: Buffer) => {
        url += d.toString();
        if (!url.endsWith("\n")) return;
        void runsOnceLoaded(url.trim().replace("/?token=t0k", ""), { Authorization: "Token t0k" }).then(
          (runs) => {
            served = runs;
            child.kill("SIGINT");
          },
          () => child.kill("SIGKILL"),
        );
      });
    });
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=t0k\n$/);
    expect(served).toBe('["train"]');
    expect(r.stderr).toContain("token required");
    expect(r.code).toBe(0);
  });
});
