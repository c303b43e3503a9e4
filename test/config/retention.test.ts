/**
 * `checkpoint.retention`: a retention type a plugin registers (`registry.registerRetention`), named
 * in the configuration as `{ type, ...options }`, decoded with the registry's codec and made once
 * for both the checkpoint hook and the directory's manager. Bad input is a problem with its path.
 */
import { isLeft, isRight } from "fp-ts/lib/Either.js";
import { describe, expect, it } from "vitest";

import { ConfigError, decodeConfig, defineJob, HookRegistry, struct, toMonitoredTrainingSessionOptions } from "../../src/config/index.js";
import { CheckpointSaverHook } from "../../hooks/CheckpointSaverHook.js";
import { Graph } from "../../src/index.js";
import plugin from "../fixtures/cli/retention-plugin.js";

const registry = async (): Promise<HookRegistry> => {
  const r = HookRegistry.withBuiltins();
  await plugin(r);
  return r;
};

const problems = (input: unknown, r: HookRegistry = HookRegistry.builtins): string[] => {
  const d = decodeConfig(input, r);
  return isLeft(d) ? d.left.map((i) => `${i.path}: ${i.message}`) : [];
};

describe("checkpoint.retention", () => {
  it("decodes a registered type with its options; unknown types and bad options are problems with their paths", async () => {
    const r = await registry();
    const ok = decodeConfig({ module: "job.js", checkpoint: { dir: "ckpt", retention: { type: "NewestAndEveryNth", newest: 2, every: 10 } } }, r);
    expect(isRight(ok) && ok.right.checkpoint?.retention).toEqual({ type: "NewestAndEveryNth", newest: 2, every: 10 });
    expect(problems({ module: "job.js", checkpoint: { dir: "ckpt", retention: { type: "NewestAndEveryNth", newest: 0, every: 10 } } }, r)).toEqual([
      "checkpoint.retention.newest: expected a positive integer, got 0",
    ]);
    expect(problems({ module: "job.js", checkpoint: { dir: "ckpt", retention: { type: "NewestAndEveryNht", newest: 1, every: 1 } } }, r)).toEqual([
      'checkpoint.retention.type: unknown retention type "NewestAndEveryNht" (did you mean "NewestAndEveryNth"?); registered: NewestAndEveryNth',
    ]);
    // Without the plugin nothing is registered: the message says how to register one.
    expect(problems({ module: "job.js", checkpoint: { dir: "ckpt", retention: { type: "NewestAndEveryNth", newest: 1, every: 1 } } })).toEqual([
      'checkpoint.retention.type: unknown retention type "NewestAndEveryNth"; none is registered (a plugin registers one with registry.registerRetention)',
    ]);
    expect(problems({ module: "job.js", checkpoint: { dir: "ckpt", maxToKeep: 3, retention: { type: "NewestAndEveryNth", newest: 1, every: 1 } } }, r)).toEqual([
      "checkpoint.retention: replaces maxToKeep and keepCheckpointEveryNHours: give retention, or those two, not both",
    ]);
  });

  it("registration: a name twice, or on the built-ins, is a ValueError; a factory that returns no function is a problem at checkpoint.retention", async () => {
    const r = await registry();
    expect(() => r.registerRetention({ type: "NewestAndEveryNth", codec: struct("X", "x", {}), create: () => () => ({ keep: [] }) })).toThrow('retention type "NewestAndEveryNth" is already registered');
    expect(() => HookRegistry.builtins.registerRetention({ type: "Y", codec: struct("Y", "y", {}), create: () => () => ({ keep: [] }) })).toThrow("HookRegistry.builtins cannot be changed");
    r.registerRetention({ type: "NotAPolicy", codec: struct("NotAPolicy", "returns a number", {}), create: () => 7 as never });
    const graph = new Graph();
    graph.globalStep();
    const d = decodeConfig({ module: "job.js", checkpoint: { dir: "ckpt", saveSteps: 1, retention: { type: "NotAPolicy" } } }, r);
    if (!isRight(d)) throw new Error("expected a decoded configuration");
    let error: unknown;
    try {
      toMonitoredTrainingSessionOptions(d.right, defineJob({ graph }), { baseDir: "/tmp", registry: r });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual([{ path: "checkpoint.retention", message: 'the factory of retention type "NotAPolicy" did not return a RetentionPolicy (a function of the checkpoints), got 7' }]);
  });

  it("the checkpoint hook and the options for the directory's manager carry the same policy value", async () => {
    const r = await registry();
    const graph = new Graph();
    graph.globalStep();
    const d = decodeConfig({ module: "job.js", checkpoint: { dir: "ckpt", saveSteps: 1, retention: { type: "NewestAndEveryNth", newest: 2, every: 5 } } }, r);
    if (!isRight(d)) throw new Error("expected a decoded configuration");
    const options = toMonitoredTrainingSessionOptions(d.right, defineJob({ graph }), { baseDir: "/tmp", registry: r });
    const hook = options.hooks?.find((h) => h instanceof CheckpointSaverHook) as unknown as { retentionPolicy: unknown } | undefined;
    expect(typeof options.retentionPolicy).toBe("function");
    expect(hook?.retentionPolicy).toBe(options.retentionPolicy);
    expect((options.retentionPolicy as { description?: string }).description).toBe("the 2 newest or a custom policy");
  });
});
