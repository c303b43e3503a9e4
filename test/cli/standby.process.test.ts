/**
 * `launch --standby` on what users run: the bundled TensorFlow.js job (data-parallel, no delay
 * between steps) under `monitored-session launch --workers 2 --standby --max-restarts 1`, on both
 * coordination backends (etcd skipped with a message without its binary). Asserts causes and
 * outcomes, never a duration (the time a standby saves is the chaos benchmark's).
 *
 * - Once the group trains, `launch` makes a standby per task; a SIGKILLed chief fails the group
 *   (a lost worker would be restarted alone, test/cli/restartAlone.process.test.ts), and the
 *   restarted group is the standbys (the same pids), which resume from the chief's checkpoint and
 *   reach the last step: `launch` exits 0, with no standby left behind.
 * - The restarted chief's goodput log counts its start from the go, not from the standby's spawn.
 * - A SIGKILLed worker is restarted alone from its standby while the chief trains on, and a
 *   standby is made again for it once it trains.
 * - The same with the task frozen (SIGSTOP) instead of killed, on the default path (standbys
 *   without `--standby`): a frozen worker is declared failed, SIGKILLed by `launch` and restarted
 *   alone from its standby; a frozen chief is found lost, SIGKILLed, and the group restarts from
 *   its standbys.
 * - `launch` SIGKILLed: its standbys end by themselves (their stdin closes).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";

import { hasEnded } from "../../src/cli/processState.js";
import { waitFor } from "../util/cli.js";
import { alive, killLaunchTree, standbyPids, startCli, type CliChild } from "../util/cliChild.js";
import { coordinationBackends } from "../util/coordinationBackends.js";
import { exampleTree } from "../util/exampleTree.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-standby-");

const launched: CliChild[] = [];
afterEach(async () => {
  for (const l of launched.splice(0)) await killLaunchTree(l);
});


const backends = coordinationBackends("standby", "standby");

const STANDBY_LINE = /^\[launch\] standby for a restart: chief:0 \(pid (\d+)\), worker:0 \(pid (\d+)\) loading run's modules$/m;

/** Whether `pid` is gone (or a zombie nobody reaped yet). */
const gone = (pid: number): boolean => !alive(pid) || hasEnded(pid);

for (const backend of backends) {
  describe.skipIf(backend.skip)(`launch --standby on the bundled job (${backend.name} coordination)`, () => {
    backend.serve();

    /** `launch --workers 2 --max-restarts 1` (and `flags`) on the bundled job to step 3000, once it has made its standbys. */
    const launchToStep3000 = async (root: string, flags: readonly string[]): Promise<CliChild> => {
      const yaml = exampleTree(root, (y) => `${y.replace(/^lastStep: \d+$/m, "lastStep: 3000")}${backend.cluster()}`);
      const l = startCli(["launch", "--workers", "2", ...flags, "--max-restarts", "1", "--kill-after", "20", yaml], { timeoutMs: 280_000 });
      launched.push(l);
      await l.waitFor(STANDBY_LINE, 120_000);
      return l;
    };
    /** After the first periodic save past 0 (so that a restart resumes from it): the chief's pid and the two standbys'. */
    const pidsAfterFirstSave = async (l: CliChild): Promise<{ chief: number; chiefStandby: string; workerStandby: string }> => {
      await l.waitFor(/^\[chief:0\] INFO Checkpoint saved: \S+model\.ckpt-1000 /m, 120_000);
      const [, chiefStandby = "", workerStandby = ""] = STANDBY_LINE.exec(l.output()) as RegExpExecArray;
      const chief = Number(/^\[launch\] started chief:0 at \S+ \(pid (\d+)\)$/m.exec(l.output())?.[1]);
      return { chief, chiefStandby, workerStandby };
    };
    /** The group restarted from its standbys (the same pids), resumed past 0 and ended well. */
    const expectRestartedFromStandbys = (out: string, chiefStandby: string, workerStandby: string): void => {
      expect(out).toMatch(new RegExp(`^\\[launch\\] started chief:0 at \\S+ \\(pid ${chiefStandby}, its standby\\)$`, "m"));
      expect(out).toMatch(new RegExp(`^\\[launch\\] started worker:0 at \\S+ \\(pid ${workerStandby}, its standby\\)$`, "m"));
      expect(out).toMatch(/^\[chief:0\] INFO Starting at global step [1-9]\d{3,} \(restored from /m);
      expect(out).toMatch(/^\[launch\] every task exited 0$/m);
    };

    it("a SIGKILLed chief: the group restarts from its standbys (the same pids), resumes and reaches the last step (exit 0), and no standby is left", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const l = await launchToStep3000(root, ["--standby"]);
      // A checkpoint past 0, so that the restart resumes from it.
      const { chief, chiefStandby, workerStandby } = await pidsAfterFirstSave(l);
      const killedAt = Date.now();
      process.kill(chief, "SIGKILL");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(0);
      expect(out).toMatch(/^\[launch\] chief:0 exited with 137 \(killed by SIGKILL\)$/m);
      expect(out).toMatch(/: restarting the group \(restart 1 of 1\)$/m);
      // The restarted group is the standbys.
      expectRestartedFromStandbys(out, chiefStandby, workerStandby);
      const logDir = join(root, "runs/tfjs-classifier");
      expect(existsSync(join(logDir, "model.ckpt-3000.index"))).toBe(true);
      // Every standby made (the restarted group's too) is gone once launch exited.
      const standbys = standbyPids(out);
      expect(standbys.length).toBe(4);
      for (const pid of standbys) expect(gone(pid), `standby ${pid}`).toBe(true);
      // The restarted chief counts its start from its go (after the kill), not from its spawn.
      const starts = readFileSync(join(logDir, "goodput/chief-0.jsonl"), "utf8")
        .split("\n")
        .filter((x) => x !== "")
        .map((x) => JSON.parse(x) as { type: string; pid?: number; processStartMs?: number })
        .filter((x) => x.type === "start");
      expect(starts.map((s) => s.pid)).toEqual([expect.any(Number), Number(chiefStandby)]);
      expect(starts[1]?.processStartMs).toBeGreaterThanOrEqual(killedAt);
    });

    it("a SIGKILLed worker: restarted alone from its standby (the same pid) while the chief trains on, a standby made again for it, the last step reached (exit 0)", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const l = await launchToStep3000(root, ["--standby"]);
      await l.waitFor(/^\[launch\] every task joined the replica group, which waits for a lost worker/m, 120_000);
      const [, , workerStandby] = STANDBY_LINE.exec(l.output()) as RegExpExecArray;
      const chief = Number(/^\[launch\] started chief:0 at \S+ \(pid (\d+)\)$/m.exec(l.output())?.[1]);
      const worker = Number(/^\[launch\] started worker:0 at \S+ \(pid (\d+)\)$/m.exec(l.output())?.[1]);
      process.kill(worker, "SIGKILL");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(0);
      expect(out).toMatch(/^\[launch\] worker:0 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 1\)$/m);
      expect(out).toMatch(new RegExp(`^\\[launch\\] started worker:0 at \\S+ \\(pid ${workerStandby}, its standby, alone: restart 1 of 1\\)$`, "m"));
      expect(out).toMatch(/^\[chief:0\] INFO The replica group re-formed its ring in generation \d+ /m);
      // The chief's process trained on: started once; the worker's standby was made again once it trained.
      expect([...out.matchAll(/^\[launch\] started chief:0 /gm)]).toHaveLength(1);
      expect(out).not.toMatch(/restarting the group/);
      expect(out).toMatch(/^\[launch\] standby for a restart: worker:0 \(pid \d+\) loading run's modules$/m);
      expect(out).toMatch(/^\[launch\] every task exited 0$/m);
      expect(existsSync(join(root, "runs/tfjs-classifier/model.ckpt-3000.index"))).toBe(true);
      for (const pid of standbyPids(out)) expect(gone(pid), `standby ${pid}`).toBe(true);
      expect(gone(chief)).toBe(true);
    });

    it("a frozen worker (SIGSTOP): declared failed, SIGKILLed by launch, restarted alone from its standby (the same pid); the last step reached (exit 0)", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const l = await launchToStep3000(root, []);
      await l.waitFor(/^\[launch\] every task joined the replica group, which waits for a lost worker/m, 120_000);
      const [, , workerStandby] = STANDBY_LINE.exec(l.output()) as RegExpExecArray;
      const worker = Number(/^\[launch\] started worker:0 at \S+ \(pid (\d+)\)$/m.exec(l.output())?.[1]);
      process.kill(worker, "SIGSTOP");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(0);
      // A stopped process leaves only with SIGKILL, which launch sends once the service declares it failed.
      expect(out).toMatch(/^\[launch\] worker:0 was declared failed by the coordination service \(chief:0 says so\): SIGKILL$/m);
      expect(out).toMatch(/^\[launch\] worker:0 died \(SIGKILL\): restarting it alone; the group waits for it to rejoin \(restart 1 of 1\)$/m);
      expect(out).toMatch(new RegExp(`^\\[launch\\] started worker:0 at \\S+ \\(pid ${workerStandby}, its standby, alone: restart 1 of 1\\)$`, "m"));
      expect([...out.matchAll(/^\[launch\] started chief:0 /gm)]).toHaveLength(1);
      expect(out).toMatch(/^\[launch\] every task exited 0$/m);
      expect(existsSync(join(root, "runs/tfjs-classifier/model.ckpt-3000.index"))).toBe(true);
      expect(gone(worker)).toBe(true);
      for (const pid of standbyPids(out)) expect(gone(pid), `standby ${pid}`).toBe(true);
    });

    it("a frozen chief (SIGSTOP): found lost, SIGKILLed by launch, the group restarts from its standbys (the same pids), resumes and reaches the last step (exit 0)", { timeout: 300_000 }, async () => {
      const root = tempDir();
      const l = await launchToStep3000(root, []);
      const { chief, chiefStandby, workerStandby } = await pidsAfterFirstSave(l);
      process.kill(chief, "SIGSTOP");
      const r = await l.done;
      const out = l.output();
      expect(r.code, out).toBe(0);
      // The worker finds it lost (on embedded coordination, the service the chief hosts stops
      // answering; on etcd, its lease runs out), and launch SIGKILLs it and restarts the group.
      const found =
        backend.name === "etcd"
          ? /^\[launch\] chief:0 was declared failed by the coordination service \(worker:0 says so\): SIGKILL$/m
          : /^\[launch\] chief:0 is lost: the coordination service it hosts stopped answering \(worker:0 says so\): SIGKILL$/m;
      expect(out).toMatch(found);
      expect(out).toMatch(/^\[launch\] chief:0 exited with 137 \(killed by SIGKILL\)$/m);
      expect(out).toMatch(/: restarting the group \(restart 1 of 1\)$/m);
      expectRestartedFromStandbys(out, chiefStandby, workerStandby);
      expect(existsSync(join(root, "runs/tfjs-classifier/model.ckpt-3000.index"))).toBe(true);
      expect(gone(chief)).toBe(true);
      for (const pid of standbyPids(out)) expect(gone(pid), `standby ${pid}`).toBe(true);
    });

    it.skipIf(backend.name === "etcd")("launch SIGKILLed: its standbys (the default with --max-restarts) end by themselves", { timeout: 200_000 }, async () => {
      const root = tempDir();
      const yaml = exampleTree(root, (y) => `${y.replace(/^lastStep: \d+$/m, "lastStep: 1000000")}${backend.cluster()}`);
      const l = startCli(["launch", "--workers", "2", "--max-restarts", "1", yaml], { timeoutMs: 180_000 });
      launched.push(l);
      await l.waitFor(STANDBY_LINE, 120_000);
      const standbys = standbyPids(l.output());
      expect(standbys.length).toBe(2);
      l.process.kill("SIGKILL");
      await l.done;
      await waitFor(() => standbys.every(gone), 60_000);
    });
  });
}
