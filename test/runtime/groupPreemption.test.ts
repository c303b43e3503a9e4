/**
 * A replica group that outlives a lost rank, and a preemption (src/runtime/groupPreemption.ts),
 * on fakes of the client, the host and the group's wait: a known preemption ends the wait and is
 * told to every rank once, through the service; a loss is waited for, told or failed.
 */
import { describe, expect, it } from "vitest";

import type { CoordinationHost } from "../../src/cluster/coordination/backend.js";
import type { CoordinationClient } from "../../src/cluster/coordination/CoordinationClient.js";
import { CancelledError, clusterFailureOf, UnavailableError } from "../../src/errors.js";
import { GroupPreemption, preemptionReport } from "../../src/runtime/groupPreemption.js";
import type { GroupRejoin } from "../../src/runtime/groupRejoin.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";

const fakes = (o: { host?: boolean; waiting?: boolean; reportFails?: boolean; loss?: "tell" | "fail" } = {}) => {
  const sent: { via: string; error: Error; final: boolean | undefined }[] = [];
  const cancelled: unknown[] = [];
  const rejoined: Error[] = [];
  const reported: Promise<void>[] = [];
  const client = {
    reportErrorToCluster: async (error: Error, options?: { final?: boolean }) => {
      if (o.reportFails === true) throw new UnavailableError("the chief's service is gone");
      sent.push({ via: "client", error, final: options?.final });
    },
  } as unknown as CoordinationClient;
  const host = { report: (error: Error, options?: { final?: boolean }) => void sent.push({ via: "host", error, final: options?.final }) } as unknown as CoordinationHost;
  const state = { waiting: o.waiting === true };
  const rejoin = {
    get waiting() {
      return state.waiting;
    },
    cancel: (e: unknown) => void cancelled.push(e),
    rejoin: (cause: Error) => {
      rejoined.push(cause);
      return new Promise(() => undefined);
    },
    underPreemption: () => o.loss ?? "tell",
  } as unknown as GroupRejoin;
  const events = new EventRecorder();
  const preemptions = new GroupPreemption({
    name: "worker:0",
    client,
    host: o.host === true ? host : undefined,
    rejoin,
    exit: { reported: (p) => void reported.push(p) },
    logger: events.logger(),
  });
  return { preemptions, rejoin, sent, cancelled, rejoined, reported, events, state };
};

describe("GroupPreemption", () => {
  it("a preemption while the group trains is only known: nothing is told, the first one counts", () => {
    const { preemptions, sent } = fakes();
    preemptions.preempted("SIGTERM", undefined);
    preemptions.preempted("SIGINT", "worker:1");
    expect(preemptions.known).toEqual({ why: "SIGTERM", claimant: undefined });
    expect(preemptions.told).toBe(false);
    expect(sent).toEqual([]);
  });

  it("a preemption while the group waits for a lost rank ends the wait and tells every rank once, finally, through the client", async () => {
    const { preemptions, sent, cancelled, reported } = fakes({ waiting: true });
    preemptions.preempted("SIGTERM", undefined);
    await Promise.all(reported);
    expect(preemptions.told).toBe(true);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.final).toBe(true);
    expect(sent[0]?.error.message).toBe("cluster preemption: task worker:0 got a termination notice (SIGTERM): every task exits with the preemption code");
    expect(clusterFailureOf(sent[0]?.error)).toEqual({ kind: "preemption", reporter: "worker:0", notice: "SIGTERM" });
    expect(cancelled).toEqual([sent[0]?.error]);
    // Told once: a loss answered after it only ends the wait (nothing sent again).
    await preemptions.answerLoss({ stopAgreed: false }, new UnavailableError("worker:1 was declared failed")).catch(() => undefined);
    expect(sent).toHaveLength(1);
    expect(cancelled).toHaveLength(2);
  });

  it("the wait is read when the preemption comes: a preemption known before the group waits is told when the loss is answered, once", async () => {
    const { preemptions, sent, state } = fakes();
    preemptions.preempted("SIGTERM", undefined);
    expect(sent).toEqual([]);
    state.waiting = true;
    const report = await preemptions.answerLoss({ stopAgreed: false }, new UnavailableError("worker:1 was declared failed")).catch((e: unknown) => e);
    expect(report).toBeInstanceOf(CancelledError);
    expect(sent).toHaveLength(1);
    await preemptions.answerLoss({ stopAgreed: false }, new UnavailableError("worker:1 was declared failed")).catch(() => undefined);
    expect(sent).toHaveLength(1);
  });

  it("a claim heard from another rank is relayed in its name; the host tells through its own service, finally, with nothing left under way", () => {
    const { preemptions, sent, reported } = fakes({ host: true, waiting: true });
    preemptions.preempted("worker:1's termination notice (SIGTERM)", "worker:1");
    expect(sent).toHaveLength(1);
    expect(sent[0]?.via).toBe("host");
    expect(sent[0]?.final).toBe(true);
    expect(reported).toEqual([]);
    expect(clusterFailureOf(sent[0]?.error)).toEqual({ kind: "preemption", reporter: "worker:0", notice: "worker:1's termination notice (SIGTERM)" });
    expect(sent[0]?.error.message).toBe(
      "cluster preemption: task worker:0 stops for worker:1's termination notice (SIGTERM) while its replica group waits for a lost rank: every task exits with the preemption code",
    );
  });

  it("after another rank's report reached this one, nothing more is told, but the wait still ends", () => {
    const { preemptions, sent, cancelled } = fakes({ waiting: true });
    preemptions.heard();
    preemptions.preempted("SIGTERM", undefined);
    expect(sent).toEqual([]);
    expect(cancelled).toHaveLength(1);
  });

  it("a report that cannot be sent is one warning naming the fallback (the missing heartbeats)", async () => {
    const { preemptions, reported, events } = fakes({ waiting: true, reportFails: true });
    preemptions.preempted("SIGTERM", undefined);
    await Promise.all(reported);
    expect(events.messages("warn")).toEqual([
      "worker:0 could not tell the other ranks of its termination notice through the coordination service (UnavailableError: the chief's service is gone); they learn of its exit from its missing heartbeats.",
    ]);
  });

  it("answers a loss: waits for the rank, or (the vote agreed) fails, or (a preemption known) tells the ranks or fails as it is", async () => {
    const cause = new UnavailableError("worker:1 was declared failed");
    const waiting = fakes();
    void waiting.preemptions.answerLoss({ stopAgreed: false }, cause);
    expect(waiting.rejoined).toEqual([cause]);

    const stopped = fakes();
    await expect(stopped.preemptions.answerLoss({ stopAgreed: true }, cause)).rejects.toBe(cause);
    expect(stopped.rejoined).toEqual([]);

    const told = fakes();
    told.preemptions.preempted("SIGTERM", undefined);
    const report = await told.preemptions.answerLoss({ stopAgreed: false }, cause).catch((e: unknown) => e);
    expect(report).toBeInstanceOf(CancelledError);
    expect((report as Error).message).toBe(preemptionReport("worker:0", "SIGTERM").message);
    expect(told.sent).toHaveLength(1);

    const failed = fakes({ loss: "fail" });
    failed.preemptions.preempted("SIGTERM", undefined);
    await expect(failed.preemptions.answerLoss({ stopAgreed: false }, cause)).rejects.toBe(cause);
    expect(failed.sent).toEqual([]);
  });
});
