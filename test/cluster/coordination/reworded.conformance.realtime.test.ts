/**
 * Recovery decides on what a failure is, never on its words: the embedded backend with every
 * error's message replaced on its way to the task (class, code and failure kept), and the
 * decisions the runtime takes on those errors (a lost chief, a preemption report and whose notice
 * it is, a lost rank, a reported error) still come out right. Real time, loopback only, real
 * heartbeats on real threads.
 */

import { afterAll, describe, expect, it } from "vitest";
import { type CoordinationClient, EmbeddedCoordinationClient } from "../../../src/cluster/coordination/index.js";
import { fromStatus, toStatus } from "../../../src/cluster/coordination/status.js";
import { CancelledError, clusterFailureOf, OpError, ResourceExhaustedError, UnavailableError } from "../../../src/errors.js";
import { isChiefLoss } from "../../../src/runtime/chiefRecovery.js";
import { chief, connectAll, rejection, tasks, untilRejected, within, worker1, worker2 } from "./conformance.js";
import { startServiceThread, type ServiceThread } from "./serviceThread.js";

const heartbeatTimeoutMs = 2_000;

let rewordings = 0;

/** `e` with a message that shares no word with the original (class, code and failure kept). */
const reworded = (e: unknown): unknown => {
  if (!(e instanceof OpError)) return e;
  rewordings += 1;
  return fromStatus({ ...toStatus(e), message: `Fehler Nummer ${rewordings}: etwas ist schiefgegangen` });
};

/** `client`, each of its rejections reworded. */
const rewording = (client: CoordinationClient): CoordinationClient =>
  new Proxy(client, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const result = (value as (...a: unknown[]) => unknown).apply(target, args);
        return result instanceof Promise ? result.catch((e: unknown) => Promise.reject(reworded(e))) : result;
      };
    },
  });

describe("coordination conformance: embedded, every message reworded", () => {
  const threads: ServiceThread[] = [];
  const cluster = () => {
    const thread = startServiceThread(heartbeatTimeoutMs);
    threads.push(thread);
    return Promise.resolve({
      thread,
      client: (spec: { task: string; isChief: boolean }) => rewording(new EmbeddedCoordinationClient(thread.transport, { ...spec, tasks, timeouts: { heartbeatTimeoutMs } })),
    });
  };
  afterAll(async () => {
    await Promise.all(threads.map((t) => t.stop()));
  });

  it("a silent worker is a lost rank, not a lost chief; a silent chief is the chief's loss", async () => {
    const c1 = await cluster();
    const [c, w1, w2] = (await connectAll(c1)) as [CoordinationClient, CoordinationClient, CoordinationClient];
    await w2.close();
    const e = await within(rejection(c.get("never", { timeoutMs: 120_000 })), 6 * heartbeatTimeoutMs + 5_000, "the chief's blocked get");
    expect(e.message).not.toContain("declared failed");
    expect(e).toBeInstanceOf(UnavailableError);
    expect(isChiefLoss(e, chief)).toBe(false);
    expect((e as OpError).failure).toEqual({ kind: "declaredFailed", tasks: [worker2] });
    await Promise.all([c.close(), w1.close()]);

    const c2 = await cluster();
    const [d, x1, x2] = (await connectAll(c2)) as [CoordinationClient, CoordinationClient, CoordinationClient];
    await d.close();
    const lost = await within(rejection(x1.get("never", { timeoutMs: 120_000 })), 6 * heartbeatTimeoutMs + 5_000, "a worker's blocked get");
    expect(lost.message).not.toContain(chief);
    expect(isChiefLoss(lost, chief)).toBe(true);
    await Promise.all([x1.close(), x2.close()]);
  });

  it("the service gone is the chief's loss; a preemption report is told apart, with whose notice it is; a reported error keeps its class", async () => {
    const c1 = await cluster();
    const [c, w1, w2] = (await connectAll(c1)) as [CoordinationClient, CoordinationClient, CoordinationClient];
    await w2.reportErrorToCluster(new CancelledError("cluster preemption: anything at all", { failure: { kind: "preemption", reporter: worker2, notice: "SIGTERM" } }));
    const report = await untilRejected(() => w1.tryGet("x"), 10_000, "the report's propagation");
    expect(report.message).not.toContain("preemption");
    expect(report).toBeInstanceOf(CancelledError);
    expect(clusterFailureOf(report)).toEqual({ kind: "preemption", reporter: worker2, notice: "SIGTERM" });
    expect(isChiefLoss(report, chief)).toBe(false);
    // A report of anything else is not a preemption, whatever its words.
    const c2 = await cluster();
    const [d, x1, x2] = (await connectAll(c2)) as [CoordinationClient, CoordinationClient, CoordinationClient];
    await x1.reportErrorToCluster(new ResourceExhaustedError("cluster preemption: out of memory"));
    const reported = await untilRejected(() => d.tryGet("x"), 10_000, "the reported error's propagation");
    expect(reported).toBeInstanceOf(ResourceExhaustedError);
    expect(clusterFailureOf(reported)?.kind).toBe("reported");
    expect((reported as OpError).failure).toEqual({ kind: "reported", reporter: worker1, errorName: "ResourceExhaustedError" });
    await Promise.all([x1.close(), x2.close(), d.close()]);
    await Promise.all([c.close(), w1.close(), w2.close()]);
    // The service's host stops: every call is the chief's loss.
    const c3 = await cluster();
    const [e, y1, y2] = (await connectAll(c3)) as [CoordinationClient, CoordinationClient, CoordinationClient];
    await c3.thread.stop();
    const gone = await untilRejected(() => y1.tryGet("y"), 10_000, "a call after the service stopped");
    expect([gone.name, (gone as OpError).failure]).toEqual(["UnavailableError", { kind: "serviceGone", backend: "embedded" }]);
    expect(isChiefLoss(gone, chief)).toBe(true);
    await Promise.all([e.close(), y1.close(), y2.close()]).catch(() => undefined);
  });
});
