/**
 * The README's cluster command as written, `monitored-session launch --workers 3
 * examples/tfjs-classifier.yaml`, on the bundled files: a temporary `examples/` holds a byte-for-
 * byte copy of the YAML and links to the repository's job modules (which Node resolves to their
 * real paths), so the YAML's relative `module` and `checkpoint.dir` (`../runs/...`) resolve as in
 * the repository, without writing into it. The three tasks train data-parallel (each says its
 * rank and the global batch of 64 × 3), and a SIGTERM to launch stops them all after one step with
 * the chief's preemption checkpoint. Outcomes only, never timings.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { killLaunchTree, startCli, type CliChild } from "../util/cliChild.js";
import { exampleTree } from "../util/exampleTree.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-bundled-launch-");

const started: CliChild[] = [];
afterEach(async () => {
  for (const c of started.splice(0)) await killLaunchTree(c);
});

describe("the README's `launch --workers 3 examples/tfjs-classifier.yaml`", () => {
  it("trains the bundled classifier data-parallel; SIGTERM to launch stops every rank after one step and the chief saves it", { timeout: 300_000 }, async () => {
    const root = tempDir();
    const l = startCli(["launch", "--workers", "3", exampleTree(root)], { timeoutMs: 240_000 });
    started.push(l);
    for (const [task, rank] of [["chief:0", 0], ["worker:0", 1], ["worker:1", 2]] as const) {
      await l.waitFor(`[${task}] INFO Data-parallel training: rank ${rank} of 3; global batch = 64 × 3 = 192.`, 200_000);
    }
    // Every rank trains (its progress line), then launch gets the SIGTERM a scheduler sends.
    for (const task of ["chief:0", "worker:0", "worker:1"]) await l.waitFor(new RegExp(`^\\[${task}\\] step [1-9]\\d*/15000 `, "m"), 200_000);
    l.process.kill("SIGTERM");
    const r = await l.done;
    expect(r.code, r.stderr).toBe(42);
    const saved = /^\[chief:0\] INFO Preemption checkpoint for step (\d+) saved: (\S+)\.$/m.exec(r.stderr);
    expect(saved, r.stderr).not.toBeNull();
    const step = saved?.[1] as string;
    expect(saved?.[2]).toBe(join(root, "runs/tfjs-classifier", `model.ckpt-${step}`));
    for (const task of ["worker:0", "worker:1"]) expect(r.stderr, task).toContain(`[${task}] INFO Preempted (`);
    for (const task of ["worker:0", "worker:1"]) expect(r.stderr, task).toContain(`at global step ${step}, where the replica group stopped`);
    // Only the chief wrote: one state file, naming the preemption checkpoint.
    const files = readdirSync(join(root, "runs"), { recursive: true }).map(String);
    expect(files.filter((f) => f.endsWith("checkpoint"))).toEqual(["tfjs-classifier/checkpoint"]);
    expect(readFileSync(join(root, "runs/tfjs-classifier/checkpoint"), "utf8")).toMatch(new RegExp(`^model_checkpoint_path: "model\\.ckpt-${step}"`, "m"));
  });
});
