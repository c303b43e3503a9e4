/**
 * TerminationNotices: signals, a watched file and the parent's death as one stream of notices
 * (virtual clock, a fake process: no real signals or time).
 */
import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";

import { ValueError } from "../../src/errors.js";
import { silentLogger } from "../../src/Logger.js";
import { kubernetesWatcher, type PlatformNotice, type PlatformWatcher } from "../../src/preemption/index.js";
import { TerminationNotices, type NoticeProcess, type TerminationNotice } from "../../src/preemption/TerminationNotices.js";
import { EventRecorder, RecordingLogger, VirtualClock } from "../../src/testing/index.js";

class FakeProcess extends EventEmitter implements NoticeProcess {
  ppid = 4242;
  send(signal: NodeJS.Signals): void {
    this.emit(signal);
  }
}

const start = (extra: Partial<Parameters<typeof TerminationNotices.start>[0]> = {}) => {
  const clock = new VirtualClock();
  const proc = new FakeProcess();
  const files = new Set<string>();
  const notices = TerminationNotices.start({ clock, process: proc, logger: silentLogger, fileExists: (p) => files.has(p), ...extra });
  const seen: TerminationNotice[] = [];
  notices.notices$.subscribe((n) => seen.push(n));
  return { clock, proc, files, notices, seen };
};

describe("TerminationNotices", () => {
  it("SIGTERM, SIGINT and SIGHUP are notices by default; the first is kept", () => {
    for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
      const { proc, notices, seen, clock } = start();
      proc.send(signal);
      expect(seen).toEqual([{ source: signal, time: clock.now(), count: 1 }]);
      expect(notices.first?.source).toBe(signal);
      notices.close();
      expect(proc.listenerCount(signal)).toBe(0);
    }
  });

  it("a copy of the first signal within the duplicate window is the same notice (npm forwards the terminal's Ctrl-C)", async () => {
    const { proc, seen, clock } = start();
    proc.send("SIGINT");
    await clock.advance(1);
    proc.send("SIGINT");
    expect(seen.map((n) => n.count)).toEqual([1]);
    await clock.advance(600);
    proc.send("SIGINT");
    expect(seen.map((n) => n.count)).toEqual([1, 2]);
    // A different interrupt counts at once; a SIGHUP after the first notice does not count again.
    proc.send("SIGTERM");
    proc.send("SIGHUP");
    expect(seen.map((n) => `${n.source}#${n.count}`)).toEqual(["SIGINT#1", "SIGINT#2", "SIGTERM#3"]);
  });

  it("the watched file is polled every second on the clock", async () => {
    const { clock, files, seen, notices } = start({ watchFile: "/drain" });
    await clock.advance(3000);
    expect(seen).toEqual([]);
    files.add("/drain");
    await clock.advance(999);
    expect(seen).toEqual([]);
    await clock.advance(1);
    expect(seen.map((n) => n.source)).toEqual(["watchFile"]);
    expect(notices.describe(seen[0] as TerminationNotice)).toBe("the file /drain appeared");
    // After the first notice polling stops.
    expect(clock.pendingTimers).toBe(0);
    notices.close();
  });

  it("a file named after start (by the configuration) is checked at once", () => {
    const { files, seen, notices } = start();
    files.add("/already-there");
    notices.watchFile("/already-there");
    expect(seen.map((n) => n.source)).toEqual(["watchFile"]);
  });

  it("the parent's death (re-parenting) is a notice within one poll", async () => {
    const { clock, proc, seen, notices } = start();
    await clock.advance(5000);
    expect(seen).toEqual([]);
    proc.ppid = 1;
    await clock.advance(1000);
    expect(seen.map((n) => n.source)).toEqual(["parentExited"]);
    expect(notices.describe(seen[0] as TerminationNotice)).toBe("the parent process exited");
  });

  it("a process whose parent is init from the start (a container's main process) does not watch it", async () => {
    const clock = new VirtualClock();
    const proc = new FakeProcess();
    proc.ppid = 1;
    const notices = TerminationNotices.start({ clock, process: proc });
    proc.ppid = 77;
    await clock.advance(10_000);
    expect(notices.first).toBeUndefined();
    notices.close();
  });

  it("signals caught before start are replayed in order; watchParent false turns the parent check off", async () => {
    const { seen, proc, clock } = start({ earlier: ["SIGTERM"], watchParent: false });
    expect(seen.map((n) => n.source)).toEqual(["SIGTERM"]);
    proc.ppid = 1;
    await clock.advance(5000);
    expect(seen).toHaveLength(1);
  });

  it("rejects bad options; close is idempotent and ends the stream", () => {
    expect(() => TerminationNotices.start({ pollSecs: 0, process: new FakeProcess() })).toThrow(ValueError);
    expect(() => TerminationNotices.start({ duplicateWindowMs: -1, process: new FakeProcess() })).toThrow("duplicateWindowMs must be >= 0");
    const { notices, proc } = start();
    let completed = false;
    notices.notices$.subscribe({ complete: () => (completed = true) });
    notices.close();
    notices.close();
    expect(completed).toBe(true);
    proc.send("SIGTERM");
    expect(notices.first).toBeUndefined();
  });
});

describe("TerminationNotices: an output whose reader is gone (a broken pipe)", () => {
  const epipe = (): NodeJS.ErrnoException => Object.assign(new Error("write EPIPE"), { code: "EPIPE" });

  it("EPIPE on a watched output is a notice (outputClosed) when it is the first; other write errors are swallowed without one", () => {
    const stdout = new EventEmitter();
    const { notices, seen, clock } = start({ watchOutputs: [stdout] });
    stdout.emit("error", Object.assign(new Error("write EIO"), { code: "EIO" }));
    expect(seen).toEqual([]);
    stdout.emit("error", epipe());
    stdout.emit("error", epipe());
    expect(seen).toEqual([{ source: "outputClosed", time: clock.now(), count: 1 }]);
    expect(notices.describe(seen[0] as TerminationNotice)).toBe("the process reading its output is gone (a broken pipe)");
    notices.close();
  });

  it("after another notice a broken pipe adds none (it would count as a second, forcing, notice); after close the error is still swallowed", () => {
    const stdout = new EventEmitter();
    const { proc, notices, seen } = start({ watchOutputs: [stdout] });
    proc.send("SIGTERM");
    stdout.emit("error", epipe());
    expect(seen.map((n) => n.source)).toEqual(["SIGTERM"]);
    notices.close();
    // An emitter with no error listener throws: the guard stays for the life of the process.
    expect(() => stdout.emit("error", epipe())).not.toThrow();
  });

  it("two watchers of one stream share one listener, and each hears the broken pipe", () => {
    const stdout = new EventEmitter();
    const a = start({ watchOutputs: [stdout] });
    const b = start({ watchOutputs: [stdout] });
    expect(stdout.listenerCount("error")).toBe(1);
    stdout.emit("error", epipe());
    expect([a.seen.length, b.seen.length]).toEqual([1, 1]);
    a.notices.close();
    b.notices.close();
  });
});

describe("TerminationNotices with a platform", () => {
  it("a platform notice joins the stream with its deadline and is described with the platform's words", async () => {
    let answer: PlatformNotice | undefined;
    const acks: string[] = [];
    const platform: PlatformWatcher = { platform: "aws", check: async () => answer, acknowledge: async (n) => void acks.push(n.detail) };
    const { clock, notices, seen } = start({ platform });
    await clock.advance(0);
    expect(seen).toEqual([]);
    const deadline = clock.now() + 120_000;
    answer = { platform: "aws", detail: 'spot instance-action "terminate" at T', deadlineMs: deadline };
    await clock.advance(1000);
    expect(seen).toEqual([{ source: "aws", time: clock.now(), count: 1, deadline }]);
    expect(notices.describe(seen[0] as TerminationNotice)).toBe('aws: spot instance-action "terminate" at T');
    await notices.acknowledge();
    expect(acks).toEqual(['spot instance-action "terminate" at T']);
    notices.close();
  });

  it("after a signal a platform notice adds nothing (it would count as a second, forcing, notice)", async () => {
    const platform: PlatformWatcher = { platform: "gce", check: async () => ({ platform: "gce", detail: "preempted", deadlineMs: undefined }) };
    const { proc, clock, notices, seen } = start({ platform });
    proc.send("SIGHUP");
    await clock.advance(0);
    expect(seen.map((n) => n.source)).toEqual(["SIGHUP"]);
    notices.close();
  });

  it("Kubernetes: SIGTERM carries the pod's grace period as its deadline; SIGINT does not", () => {
    const { proc, clock, notices, seen } = start();
    notices.watchPlatform(kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "30" } }));
    proc.send("SIGTERM");
    expect(seen).toEqual([{ source: "SIGTERM", time: clock.now(), count: 1, deadline: clock.now() + 30_000 }]);
    notices.close();
    const other = start();
    other.notices.watchPlatform(kubernetesWatcher({ env: { TERMINATION_GRACE_PERIOD_SECONDS: "30" } }));
    other.proc.send("SIGINT");
    expect(other.seen[0]?.deadline).toBeUndefined();
    other.notices.close();
  });
});

describe("TerminationNotices' lines", () => {
  it("are log events on events$ (source notices; its platform poller's keep source platform), each printed once by its logger while no session adopts them; a file that cannot be checked is warned once per streak", async () => {
    const logger = new RecordingLogger();
    const heard = new EventRecorder();
    let failing = true;
    const platform: PlatformWatcher = {
      platform: "aws",
      check: async () => {
        if (failing) throw new Error("connection refused");
        return undefined;
      },
    };
    const { clock, notices } = start({
      logger,
      platform,
      watchFile: "/run/notice",
      fileExists: () => {
        if (failing) throw new Error("EACCES: permission denied");
        return false;
      },
    });
    heard.record(notices.events$);
    await clock.advance(0);
    await clock.advance(1000);
    failing = false;
    await clock.advance(1000);
    await clock.advance(1000);
    expect(heard.lines().map((e) => [e.source, e.level, e.message])).toEqual([
      ["platform", "warn", "aws: polling for termination notices failed (polling goes on): connection refused"],
      ["notices", "debug", "TerminationNotices: cannot check /run/notice again: EACCES: permission denied"],
      ["platform", "debug", "aws: poll failed again: connection refused"],
      ["notices", "info", "TerminationNotices: /run/notice can be checked again."],
      ["platform", "info", "aws: the metadata service answers again."],
    ]);
    // The first warning came from start(), before anyone subscribed; the logger printed it and every later line once.
    expect(logger.entries.map((e) => e.message)).toEqual(["TerminationNotices: cannot check /run/notice (polling goes on): EACCES: permission denied", ...heard.messages()]);
    // A session that adopts them prints them instead.
    const release = notices.adopt();
    failing = true;
    await clock.advance(1000);
    expect(heard.messages("warn")).toHaveLength(3);
    expect(logger.entries).toHaveLength(6);
    release();
    notices.close();
  });
});
