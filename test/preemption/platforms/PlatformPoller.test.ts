/**
 * PlatformPoller: polling on the clock, a timeout on every request (a hung metadata server),
 * one warning per failure streak, one notice, the acknowledgement, and never delaying start.
 */

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { azureWatcher, gceWatcher, type PlatformNotice, type PlatformWatcher } from "../../../src/preemption/index.js";
import { PlatformPoller } from "../../../src/preemption/platforms/PlatformWatcher.js";
import { ValueError } from "../../../src/errors.js";
import { VirtualClock } from "../../../src/testing/VirtualClock.js";
import { EventRecorder, RecordingLogger } from "../../../src/testing/index.js";
import { silentLogger } from "../../../src/Logger.js";
import { startFakeMetadataServer, table, type FakeMetadataServer } from "./fakeMetadataServer.js";

const PREEMPTED = "GET /computeMetadata/v1/instance/preempted";
const MAINTENANCE = "GET /computeMetadata/v1/instance/maintenance-event";
const quiet = table({ [PREEMPTED]: { status: 200, body: "FALSE" }, [MAINTENANCE]: { status: 200, body: "NONE" } });

let server: FakeMetadataServer;
let clock: VirtualClock;
let poller: PlatformPoller | undefined;
beforeEach(async () => {
  server = await startFakeMetadataServer(quiet);
  clock = new VirtualClock();
});
afterEach(async () => {
  poller?.close();
  await server.close();
});

describe("PlatformPoller", () => {
  it("starts without waiting for the network: the first poll is on a zero-delay timer", async () => {
    const check = vi.fn(async () => undefined);
    poller = PlatformPoller.start({ platform: "gce", check }, () => undefined, { clock });
    expect(check).not.toHaveBeenCalled();
    await clock.advance(0);
    expect(check).toHaveBeenCalledTimes(1);
    await clock.advance(999);
    expect(check).toHaveBeenCalledTimes(1);
    await clock.advance(1);
    expect(check).toHaveBeenCalledTimes(2);
  });

  it("a hung metadata server: the request is aborted after timeoutSecs on the clock, warned once, and polling goes on", async () => {
    server.route((r) => (r.url.endsWith("preempted") ? "hang" : undefined));
    const heard = new EventRecorder();
    const notices: PlatformNotice[] = [];
    poller = PlatformPoller.start(gceWatcher({ baseUrl: server.baseUrl, clock }), (n) => notices.push(n), { clock, logger: silentLogger, timeoutSecs: 2, pollSecs: 1 });
    heard.record(poller.events$);
    const first = server.nextRequest();
    await clock.advance(0);
    await first;
    await clock.advance(2000); // the timeout aborts the hung request
    await vi.waitFor(() => expect(heard.messages("warn")).toEqual([expect.stringMatching(/gce: polling for termination notices failed .*no answer within 2 s/)]));
    // The next poll is a second later; the server now answers with a notice.
    server.route(table({ [PREEMPTED]: { status: 200, body: "TRUE" } }));
    const second = server.nextRequest();
    await clock.advance(1000);
    await second;
    await vi.waitFor(() => expect(notices).toHaveLength(1));
    expect(heard.lines().some((l) => l.message.includes("answers again"))).toBe(true);
    expect(heard.messages("warn")).toHaveLength(1);
    // One notice is enough: no more polls.
    const before = server.requests.length;
    await clock.advance(10_000);
    expect(server.requests.length).toBe(before);
  });

  it("a malformed answer is warned once per streak, then polls go on", async () => {
    const heard = new EventRecorder();
    let calls = 0;
    const check = async () => {
      calls += 1;
      throw new Error("malformed answer from somewhere");
    };
    poller = PlatformPoller.start({ platform: "aws", check }, () => undefined, { clock, logger: silentLogger });
    heard.record(poller.events$);
    for (let i = 0; i < 4; i++) await clock.advance(1000);
    expect(calls).toBeGreaterThanOrEqual(4);
    expect(heard.messages("warn")).toEqual([expect.stringContaining("aws: polling for termination notices failed (polling goes on): malformed answer")]);
  });

  it("after a failure streak, the first answer is logged once at info (\"answers again\"); answers without a failure before are not", async () => {
    const heard = new EventRecorder();
    const answers: ("fail" | "quiet")[] = ["quiet", "fail", "fail", "quiet", "quiet", "fail", "quiet"];
    const check = async (): Promise<PlatformNotice | undefined> => {
      if (answers.shift() === "fail") throw new Error("connection refused");
      return undefined;
    };
    poller = PlatformPoller.start({ platform: "aws", check }, () => undefined, { clock, logger: silentLogger, pollSecs: 1 });
    heard.record(poller.events$);
    await clock.advance(0);
    for (let i = 0; i < 6; i++) await clock.advance(1000);
    expect(answers).toEqual([]);
    expect(heard.lines().map((e) => [e.level, e.message])).toEqual([
      ["warn", "aws: polling for termination notices failed (polling goes on): connection refused"],
      ["debug", "aws: poll failed again: connection refused"],
      ["info", "aws: the metadata service answers again."],
      ["warn", "aws: polling for termination notices failed (polling goes on): connection refused"],
      ["info", "aws: the metadata service answers again."],
    ]);
  });

  it("its lines are log events of source platform on events$, printed once by its logger while no session adopts them", async () => {
    const logger = new RecordingLogger();
    const check = async (): Promise<PlatformNotice | undefined> => {
      throw new Error("connection refused");
    };
    poller = PlatformPoller.start({ platform: "aws", check }, () => undefined, { clock, logger });
    const heard = new EventRecorder();
    heard.record(poller.events$);
    await clock.advance(0);
    expect(heard.lines().map((e) => [e.source, e.level, e.message])).toEqual([["platform", "warn", "aws: polling for termination notices failed (polling goes on): connection refused"]]);
    expect(logger.entries).toEqual([{ level: "warn", message: "aws: polling for termination notices failed (polling goes on): connection refused" }]);
    const release = poller.adopt();
    await clock.advance(1000);
    expect(heard.messages("debug")).toEqual(["aws: poll failed again: connection refused"]);
    expect(logger.entries).toHaveLength(1);
    release();
  });

  it("close aborts a request in flight and stops polling", async () => {
    let aborted = false;
    const check = (signal: AbortSignal) =>
      new Promise<undefined>((_, reject) => signal.addEventListener("abort", () => ((aborted = true), reject(new Error("aborted")))));
    const heard = new EventRecorder();
    poller = PlatformPoller.start({ platform: "gce", check }, () => undefined, { clock, logger: silentLogger });
    heard.record(poller.events$);
    await clock.advance(0);
    poller.close();
    await clock.advance(0);
    expect(aborted).toBe(true);
    expect(heard.messages("warn")).toEqual([]);
  });

  it("acknowledges the notice once, and a failed acknowledgement is only logged", async () => {
    const notice: PlatformNotice = { platform: "azure", detail: "Preempt e1", deadlineMs: undefined, eventId: "e1" };
    const acks: string[] = [];
    const heard = new EventRecorder();
    const watcher: PlatformWatcher = {
      platform: "azure",
      check: async () => notice,
      acknowledge: async (n) => {
        acks.push(n.eventId ?? "");
        if (acks.length > 0) throw new Error("HTTP 500");
      },
    };
    poller = PlatformPoller.start(watcher, () => undefined, { clock, logger: silentLogger });
    heard.record(poller.events$);
    await poller.acknowledge(); // no notice yet: nothing
    expect(acks).toEqual([]);
    await clock.advance(0);
    await vi.waitFor(() => expect(poller?.notice).toBe(notice));
    await poller.acknowledge();
    await poller.acknowledge();
    expect(acks).toEqual(["e1"]);
    expect(heard.messages("warn")).toEqual([expect.stringContaining("acknowledging the termination notice failed")]);
  });

  it("a watcher without check (Kubernetes) is not polled; bad intervals are rejected", async () => {
    poller = PlatformPoller.start({ platform: "kubernetes", signalGraceSecs: 30 }, () => undefined, { clock });
    await clock.advance(10_000);
    expect(() => PlatformPoller.start({ platform: "gce" }, () => undefined, { pollSecs: 0 })).toThrow(ValueError);
    expect(() => PlatformPoller.start({ platform: "gce" }, () => undefined, { timeoutSecs: Number.NaN })).toThrow(/timeoutSecs/);
  });

  it("a hung acknowledgement (Azure StartRequests) is aborted at the timeout and only logged", async () => {
    const events = JSON.stringify({ DocumentIncarnation: 1, Events: [{ EventId: "e9", EventType: "Terminate", Resources: [], EventStatus: "Scheduled", NotBefore: "" }] });
    server.route((r) => (r.method === "POST" ? "hang" : { status: 200, body: events }));
    const heard = new EventRecorder();
    const notices: PlatformNotice[] = [];
    poller = PlatformPoller.start(azureWatcher({ baseUrl: server.baseUrl }), (n) => notices.push(n), { clock, logger: silentLogger, timeoutSecs: 2 });
    heard.record(poller.events$);
    await clock.advance(0);
    await vi.waitFor(() => expect(notices).toHaveLength(1));
    const posted = server.nextRequest();
    const ack = poller.acknowledge();
    await posted;
    await clock.advance(2000);
    await ack; // resolves: never rejects
    expect(heard.messages("warn")).toEqual([expect.stringMatching(/azure: acknowledging the termination notice failed .*no answer within 2 s/)]);
  });
});
