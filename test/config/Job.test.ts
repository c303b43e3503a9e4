/** The job contract at the boundary: what `decodeJob` accepts matches what `Job`'s types accept. */
import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";

import { decodeJob, defineJob, HookRegistry, NonEmptyString, struct, required } from "../../src/config/index.js";
import { Graph, hook, isSessionRunHook, SessionRunArgs, SessionRunHook } from "../../src/index.js";
import { Scaffold } from "../../src/creation/Scaffold.js";

const graph = new Graph();
graph.op("train", () => 1);

describe("decodeJob", () => {
  it("accepts plain-object hooks, as the SessionRunHook interface does, and class instances", async () => {
    class Counting extends SessionRunHook {
      n = 0;
      override afterRun(): void {
        this.n += 1;
      }
    }
    // These compile as `Job` hooks, so they must decode.
    const job = defineJob({
      graph,
      hooks: [{ afterRun: () => undefined }, hook("named", { beforeRun: () => SessionRunArgs("train") }), new Counting(), {}],
    });
    const r = await decodeJob({ default: job });
    expect(isRight(r)).toBe(true);
  });

  it("calls a function default export with the context (empty by default); batchSize must be a positive integer", async () => {
    const seen: unknown[] = [];
    const factory = (context: unknown) => {
      seen.push(context);
      return defineJob({ graph, batchSize: 64 });
    };
    const context = { replica: undefined };
    expect(isRight(await decodeJob({ default: factory }, context))).toBe(true);
    expect(isRight(await decodeJob({ default: factory }))).toBe(true);
    expect(seen).toEqual([context, {}]);
    expect(seen[0]).toBe(context);
    const bad = await decodeJob({ default: { graph, batchSize: 0 } });
    expect(isLeft(bad) && bad.left.map((i) => i.path)).toEqual(["default.batchSize"]);
  });

  it("a Scaffold or Graph from another copy of monitored-session is named as such, with the fix; anything else is shown as it is", async () => {
    // What a second install of the package gives: a class of the same name, not the CLI's.
    const copies = { Scaffold: class Scaffold {}, Graph: class Graph {} };
    const r = await decodeJob({ default: { graph: new copies.Graph(), scaffold: new copies.Scaffold() } });
    expect(isLeft(r) && r.left.map((i) => `${i.path}: ${i.message}`)).toEqual([
      'default.graph: expected a Graph of the monitored-session the CLI runs, got a Graph from another copy of it (the job and the CLI load monitored-session from different paths: import it by its package name, once, e.g. "monitored-session"; inside a clone of monitored-session, run the command as npm run cli -- ..., whose --conditions=monitored-session-source gives the job the CLI\'s copy in src/)',
      'default.scaffold: expected a Scaffold of the monitored-session the CLI runs, got a Scaffold from another copy of it (the job and the CLI load monitored-session from different paths: import it by its package name, once, e.g. "monitored-session"; inside a clone of monitored-session, run the command as npm run cli -- ..., whose --conditions=monitored-session-source gives the job the CLI\'s copy in src/)',
    ]);
    const plain = await decodeJob({ default: { graph, scaffold: { ready: true } } });
    expect(isLeft(plain) && plain.left.map((i) => `${i.path}: ${i.message}`)).toEqual(["default.scaffold: expected a Scaffold, got {\"ready\":true}"]);
  });

  it("rejects what is not a hook, naming the key that is wrong", async () => {
    const r = await decodeJob({ default: { graph, hooks: [{ afterRun: 3 }, "x", { provides: [1] }] } });
    expect(isLeft(r) && r.left.map((i) => `${i.path}: ${i.message}`)).toEqual([
      "default.hooks[0]: expected a SessionRunHook (afterRun: expected a function)",
      "default.hooks[1]: expected a SessionRunHook (expected a hook (an object with some of begin, afterCreateSession, beforeRun, afterRun, end))",
      "default.hooks[2]: expected a SessionRunHook (provides: expected a list of strings)",
    ]);
  });

  it("isSessionRunHook agrees with the codec", () => {
    expect(isSessionRunHook({ end: () => undefined })).toBe(true);
    expect(isSessionRunHook(new SessionRunHook())).toBe(true);
    expect(isSessionRunHook({ end: "later" })).toBe(false);
    expect(isSessionRunHook(null)).toBe(false);
  });
});

describe("HookRegistry.create", () => {
  const registry = HookRegistry.withBuiltins();
  registry.register({ type: "Plain", codec: struct("Plain", "A plain-object hook.", { tag: required(NonEmptyString, "A tag.") }), create: (o) => ({ name: o.tag, end: () => undefined }) });
  registry.register({ type: "Broken", codec: struct("Broken", "Returns no hook.", {}), create: () => 42 as never });
  const context = { resolvePath: (p: string) => p, scaffold: new Scaffold({ graph }) };

  it("returns a plain-object hook from a factory", () => {
    expect(registry.create({ type: "Plain", tag: "t" }, context).name).toBe("t");
  });

  it("throws when a factory returns something that is not a hook", () => {
    expect(() => registry.create({ type: "Broken" }, context)).toThrow(/factory of hook type "Broken" did not return a SessionRunHook/);
  });
});
