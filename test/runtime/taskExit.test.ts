/**
 * How a started task leaves its cluster (src/runtime/taskExit.ts), on fakes of its client and
 * host: the first call decides how, a clean exit passes the shutdown barrier and drains, a
 * failing one lets its report finish and, on the host, waits until the others heard a final
 * report; and the start barrier is passed once per generation.
 */
import { describe, expect, it } from "vitest";

import type { CoordinationHost } from "../../src/cluster/coordination/backend.js";
import type { CoordinationClient } from "../../src/cluster/coordination/CoordinationClient.js";
import { CancelledError, DeadlineExceededError } from "../../src/errors.js";
import { startBarrierOnce, TaskExit, type TaskExitParts } from "../../src/runtime/taskExit.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const ME = "/job:chief/task:0";
const TASKS = [ME, "/job:worker/task:0", "/job:worker/task:1"];

/** A fake client and host that record what the exit does, in order. */
const fakes = (o: { shutdownFails?: boolean; finalReport?: boolean; untold?: string[]; stillIn?: string[]; host?: boolean } = {}) => {
  const calls: string[] = [];
  const client = {
    generation: 1,
    shutdown: async () => {
      calls.push("shutdown");
      if (o.shutdownFails === true) throw new DeadlineExceededError("shutdown barrier timed out");
    },
    close: async () => void calls.push("client.close"),
  } as unknown as CoordinationClient;
  const host: CoordinationHost = {
    report: () => void calls.push("host.report"),
    hasFinalReport: () => o.finalReport === true,
    waitUntilTold: async (tasks, ms) => {
      calls.push(`waitUntilTold ${tasks.join(",")} ${ms}`);
      return o.untold ?? [];
    },
    waitUntilAllLeft: async (ms) => {
      calls.push(`waitUntilAllLeft ${ms}`);
      return o.stillIn ?? [];
    },
  };
  const events = new EventRecorder();
  const parts: TaskExitParts = {
    name: "chief:0",
    me: ME,
    tasks: TASKS,
    client,
    host: o.host === false ? undefined : host,
    stopServer: async () => void calls.push("stopServer"),
    drainMs: 5000,
    tellBoundMs: 3000,
    logger: events.logger(),
  };
  return { calls, events, exit: new TaskExit(parts) };
};

describe("TaskExit", () => {
  it("a clean exit: the shutdown barrier, then the host drains, then the server stops; the first call decides, later calls are the first's", async () => {
    const { calls, exit } = fakes();
    expect(exit.leaving).toBe(false);
    const first = exit.finish(true);
    expect(exit.leaving).toBe(true);
    expect(exit.finish(false)).toBe(first);
    expect(await first).toBeUndefined();
    expect(exit.draining).toBe(true);
    expect(calls).toEqual(["shutdown", "waitUntilAllLeft 5000", "stopServer"]);
  });

  it("a failed shutdown barrier is returned; the client closes, and the host says it serves the others and whom it left behind", async () => {
    const { calls, exit, events } = fakes({ shutdownFails: true, stillIn: ["/job:worker/task:1"] });
    const error = await exit.finish(true);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(calls).toEqual(["shutdown", "client.close", "waitUntilAllLeft 5000", "stopServer"]);
    expect(events.messages("info")).toEqual(["Serving the coordination service until every other task has left (up to 5 s, cluster.timeouts.drainTimeoutSecs)."]);
    expect(events.messages("warn")).toEqual([
      "Stopping the coordination service after 5 s (cluster.timeouts.drainTimeoutSecs) with /job:worker/task:1 still in the cluster: they fail with UnavailableError.",
    ]);
  });

  it("a task that hosts nothing does not drain", async () => {
    const { calls, exit } = fakes({ host: false });
    await exit.finish(true);
    expect(calls).toEqual(["shutdown", "stopServer"]);
  });

  it("leaving cancels the waits with a CancelledError naming the task, and closes the rings: the first and the latest re-form's only", async () => {
    const { exit } = fakes();
    const cancelled: unknown[] = [];
    const closed: string[] = [];
    const ring = (name: string) => ({ close: async () => void closed.push(name) });
    exit.cancelOnLeave({ cancel: (e) => cancelled.push(e) });
    exit.cancelOnLeave(undefined);
    exit.closeOnLeave(ring("group"));
    exit.closeOnLeave(undefined);
    exit.ringFormed(ring("re-form 1"));
    exit.ringFormed(ring("re-form 2"));
    exit.closeOnLeave({ close: () => Promise.reject(new Error("closed already")) });
    await exit.finish(true);
    expect(cancelled).toHaveLength(1);
    expect(cancelled[0]).toBeInstanceOf(CancelledError);
    expect((cancelled[0] as Error).message).toBe("task chief:0 is leaving the cluster");
    expect(closed).toEqual(["group", "re-form 2"]);
  });

  it("a failing exit lets the report under way finish, and the host waits (three heartbeat timeouts) until the others but the lost rank heard its final report", async () => {
    const { calls, exit, events } = fakes({ finalReport: true, untold: ["/job:worker/task:0"] });
    let sent!: () => void;
    exit.reported(new Promise<void>((resolve) => (sent = resolve)).then(() => void calls.push("report sent")));
    exit.skipWhenTelling(() => "/job:worker/task:1");
    const leaving = exit.finish(false);
    await Promise.resolve();
    expect(calls).toEqual([]);
    sent();
    expect(await leaving).toBeUndefined();
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual(["report sent", "waitUntilTold /job:worker/task:0 3000", "client.close", "stopServer"]);
    expect(events.messages("info")).toEqual(["Telling the other task of the termination notice through the coordination service (up to 3 s)."]);
    expect(events.messages("warn")).toEqual(["/job:worker/task:0 did not hear of the termination notice within 3 s; they learn of the chief's exit from the missing service."]);
  });

  it("a failing exit with no lost rank tells every other task (plural), and warns of no one when all heard", async () => {
    const { calls, exit, events } = fakes({ finalReport: true });
    expect(await exit.finish(false)).toBeUndefined();
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual(["waitUntilTold /job:worker/task:0,/job:worker/task:1 3000", "client.close", "stopServer"]);
    expect(events.messages("info")).toEqual(["Telling the 2 other tasks of the termination notice through the coordination service (up to 3 s)."]);
    expect(events.messages("warn")).toEqual([]);
  });

  it("a failing exit without a final report on the service tells no one", async () => {
    const { calls, exit, events } = fakes({ finalReport: false });
    await exit.finish(false);
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toEqual(["client.close", "stopServer"]);
    expect(events.messages()).toEqual([]);
  });

  it("untilErrorHeard: nothing without a final report; with one, the host waits until every other task heard it, then leaves (a later finish is that leaving)", async () => {
    const quiet = fakes();
    await quiet.exit.untilErrorHeard();
    expect(quiet.calls).toEqual([]);
    expect(quiet.exit.leaving).toBe(false);

    const { calls, exit, events } = fakes({ finalReport: true, untold: ["/job:worker/task:1"] });
    await exit.untilErrorHeard();
    expect(exit.leaving).toBe(true);
    expect(calls).toEqual(["waitUntilTold /job:worker/task:0,/job:worker/task:1 3000", "client.close", "stopServer"]);
    expect(events.messages("warn")).toEqual(["/job:worker/task:1 did not hear of the cluster's error within 3 s; they learn of the chief's exit from the missing service."]);
    expect(await exit.finish(true)).toBeUndefined();
    expect(calls).not.toContain("shutdown");
  });
});

describe("startBarrierOnce", () => {
  it("passes once per generation, again after a failed pass, and again in the next generation", async () => {
    const client = { generation: 1 as number | undefined };
    let passes = 0;
    let fail = false;
    const pass = startBarrierOnce(client, async () => {
      passes++;
      if (fail) throw new DeadlineExceededError("start barrier timed out");
    });
    const a = pass();
    expect(pass()).toBe(a);
    await a;
    expect(passes).toBe(1);

    client.generation = 2;
    fail = true;
    await expect(pass()).rejects.toBeInstanceOf(DeadlineExceededError);
    fail = false;
    await pass();
    expect(passes).toBe(3);

    // Without a generation (a client between generations), every call passes again.
    client.generation = undefined;
    await pass();
    await pass();
    expect(passes).toBe(5);
  });
});
