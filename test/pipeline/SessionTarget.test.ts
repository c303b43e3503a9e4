import { readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { silentLogger } from "../../src/Logger.js";
import type { Session } from "../../src/session/Session.js";
import { defaultSessionTargets, inProcessTarget, SessionTargetRegistry, type SessionTargetResolver } from "../../src/pipeline/SessionTarget.js";
import { FakeSession, VirtualClock } from "../../src/testing/index.js";
import { monitoredTrainingSession } from "../../src/training/monitoredTrainingSession.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("session-target-");

/** A fake remote scheme: its sessions are FakeSessions, and it records the targets it resolved. */
const fakeRemote = (): SessionTargetResolver & { readonly resolved: string[]; readonly sessions: Session[] } => {
  const resolved: string[] = [];
  const sessions: Session[] = [];
  return {
    scheme: "fake",
    resolved,
    sessions,
    resolve: (master) => {
      resolved.push(master);
      return {
        master,
        sessionFactory: () => () => {
          const s = new FakeSession();
          sessions.push(s);
          return s;
        },
      };
    },
  };
};

describe("session targets (master)", () => {
  it('"" resolves to the in-process target, which keeps the caller\'s factory', () => {
    const factory = () => new FakeSession();
    const target = defaultSessionTargets.resolve("");
    expect(target.master).toBe("");
    expect(target.sessionFactory(factory)).toBe(factory);
    expect(target.sessionFactory(undefined)).toBeUndefined();
  });

  it("a scheme without a resolver is a one-line error naming the fix (grpc://: the cluster's registry)", () => {
    expect(() => defaultSessionTargets.resolve("grpc://ps0:2222")).toThrow(
      new ValueError('master "grpc://ps0:2222": this registry has no resolver for grpc:// session targets; pass sessionTargets: clusterSessionTargets(...) from "monitored-session/cluster"'),
    );
    expect(() => defaultSessionTargets.resolve("ipc://x")).toThrow(
      new ValueError('master "ipc://x": this registry has no resolver for ipc:// session targets; supported: "" (in-process)'),
    );
    expect(() => defaultSessionTargets.resolve("local")).toThrow('master "local" is not a session target: use "" (in-process) or "<scheme>://<address>"');
  });

  it("with() adds a resolver without changing the original registry; duplicate schemes are rejected", () => {
    const remote = fakeRemote();
    const registry = defaultSessionTargets.with(remote);
    expect(registry.schemes).toEqual(["", "fake"]);
    expect(defaultSessionTargets.schemes).toEqual([""]);
    registry.resolve("FAKE://host:1");
    expect(remote.resolved).toEqual(["FAKE://host:1"]);
    expect(() => new SessionTargetRegistry([inProcessTarget, inProcessTarget])).toThrow('two resolvers for the scheme ""');
  });

  it("monitoredTrainingSession makes its sessions through the resolved target", async () => {
    const remote = fakeRemote();
    const sess = await monitoredTrainingSession({
      master: "fake://worker0",
      sessionTargets: defaultSessionTargets.with(remote),
      graph: new Graph(),
      saveCheckpointSecs: null,
      saveSummariesSteps: null,
      logStepCountSteps: null,
      clock: new VirtualClock(),
      logger: silentLogger,
    });
    expect(remote.resolved).toEqual(["fake://worker0"]);
    expect(sess.rawSession).toBe(remote.sessions[0]);
    await sess.close();
  });

  it("monitoredTrainingSession rejects an unsupported master before it writes anything", async () => {
    const dir = tempDir();
    await expect(
      monitoredTrainingSession({ master: "grpc://chief:2222", graph: new Graph(), checkpointDir: dir, clock: new VirtualClock(), logger: silentLogger }),
    ).rejects.toThrow(ValueError);
    expect(readdirSync(dir)).toEqual([]);
  });
});
