/**
 * Registration with the coordination service (`connectCurrent` of src/runtime/clusterRuntime.ts)
 * says that it still waits, every 30 s of a virtual clock, with a fake client whose `connect()`
 * the test settles: a worker whose peers resolve but never answer does not wait in silence.
 */
import { describe, expect, it } from "vitest";

import type { CoordinationClient } from "../../src/cluster/coordination/CoordinationClient.js";
import { AbortedError, DeadlineExceededError } from "../../src/errors.js";
import { connectCurrent } from "../../src/runtime/coordinationSetup.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { flush, VirtualClock } from "../../src/testing/VirtualClock.js";

const LINE = (secs: number, limit = "cluster.timeouts.registrationTimeoutSecs", upTo = 3600) =>
  `Still registering with the coordination service after ${secs} s (waiting for every task of the cluster; up to ${upTo} s, ${limit}).`;

/** A client whose every `connect()` stays pending until the test settles it. */
const pendingClient = () => {
  const calls: { ok: () => void; fail: (e: unknown) => void }[] = [];
  const client = {
    connect: () => new Promise<void>((ok, fail) => calls.push({ ok, fail })),
  } as unknown as CoordinationClient;
  return { client, calls };
};

const progress = (events: EventRecorder): string[] => events.messages("info").filter((m) => m.startsWith("Still registering"));

describe("connectCurrent: registration says it still waits", () => {
  it("one INFO line every 30 s while connect() is pending (30 s: one, 60 s: two); none once it resolved, and no timer is left", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const { client, calls } = pendingClient();
    let done = false;
    const connecting = connectCurrent(client, 3_600_000, clock, events.logger(() => clock.now())).then(() => {
      done = true;
    });
    await flush();
    expect(calls).toHaveLength(1);
    await clock.advanceSecs(29);
    expect(progress(events)).toEqual([]);
    await clock.advanceSecs(1);
    expect(progress(events)).toEqual([LINE(30)]);
    await clock.advanceSecs(30);
    expect(progress(events)).toEqual([LINE(30), LINE(60)]);
    calls[0]?.ok();
    await connecting;
    expect(done).toBe(true);
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceSecs(300);
    expect(progress(events)).toHaveLength(2);
  });

  it("a registration that fails clears the timer too: its error, and no more lines", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const { client, calls } = pendingClient();
    const connecting = connectCurrent(client, 3_600_000, clock, events.logger(() => clock.now()));
    await clock.advanceSecs(30);
    expect(progress(events)).toEqual([LINE(30)]);
    calls[0]?.fail(new DeadlineExceededError("registration timed out"));
    await expect(connecting).rejects.toThrow(DeadlineExceededError);
    expect(clock.pendingTimers).toBe(0);
    await clock.advanceSecs(300);
    expect(progress(events)).toHaveLength(1);
  });

  it("the count runs across a registration aborted for the chief's new generation, and the line names the limit it was given", async () => {
    const clock = new VirtualClock();
    const events = new EventRecorder();
    const { client, calls } = pendingClient();
    const connecting = connectCurrent(client, 120_000, clock, events.logger(() => clock.now()), "maxWaitSecs");
    await clock.advanceSecs(20);
    calls[0]?.fail(new AbortedError("generation 1 ended"));
    await clock.advanceSecs(20);
    expect(calls).toHaveLength(2);
    expect(progress(events)).toEqual([LINE(30, "maxWaitSecs", 120)]);
    expect(events.messages("info")).toContain("Registration aborted (generation 1 ended); registering again for the chief's new generation.");
    calls[1]?.ok();
    await connecting;
    expect(clock.pendingTimers).toBe(0);
  });
});
