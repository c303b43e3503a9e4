/** ResumableState: extra state saved and restored with the variables through the same Saver. */

import * as t from "io-ts";
import { beforeEach, describe, expect, it } from "vitest";

import { CheckpointManager } from "../../src/checkpoint/index.js";
import { InvalidArgumentError, NotFoundError, ValueError } from "../../src/errors.js";
import { Graph } from "../../src/session/Graph.js";
import { ResumableState } from "../../src/creation/ResumableState.js";
import { tensor, type TensorValue } from "../../src/session/Tensor.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
});
const graph = () => {
  const g = new Graph();
  g.globalStep();
  g.variable("w", 1.5);
  return g;
};

describe("ResumableState", () => {
  it("saves JSON and tensor state in the same checkpoint as the variables and restores both", async () => {
    let pos = { epoch: 2, index: 17 };
    let noise: TensorValue = tensor("float32", [2], Float32Array.of(0.25, -1));
    const state = new ResumableState()
      .register("data/iterator", { save: () => pos, restore: (v) => void (pos = v) }, { codec: t.type({ epoch: t.number, index: t.number }) })
      .registerTensor("noise", { save: () => noise, restore: (v) => void (noise = v) });
    const s1 = state.wrapSession(graph().session());
    await s1.variables?.initialize();
    const manager = await CheckpointManager.create({ directory: dir });
    await manager.save(s1.variables!);
    pos = { epoch: 0, index: 0 };
    noise = tensor("float32", [0], new Float32Array(0));

    const s2 = state.wrapSession(graph().session());
    expect(await manager.restoreOrInitialize(s2.variables!)).toBe(`${dir}/ckpt-1`);
    expect(pos).toEqual({ epoch: 2, index: 17 });
    expect([...noise.data]).toEqual([0.25, -1]);
    expect(await s2.run("w")).toBe(1.5);
    expect(s2.variables!.names("global")).toEqual(["global_step", "w", "data/iterator", "noise"]);
    expect(s2.variables!.names("local")).toEqual([]);
  });

  it("a restored value that fails its codec is rejected with its path, and nothing is restored", async () => {
    const restored: unknown[] = [];
    const bad = new ResumableState().register("it", { save: () => ({ epoch: "x" }), restore: () => undefined });
    const s1 = bad.wrapSession(graph().session());
    await s1.variables?.initialize();
    const manager = await CheckpointManager.create({ directory: dir });
    await manager.save(s1.variables!);
    const strict = new ResumableState().register(
      "it",
      { save: () => ({ epoch: 0 }), restore: (v) => void restored.push(v) },
      { codec: t.type({ epoch: t.number }) },
    );
    const s2 = strict.wrapSession(graph().session());
    const err = await manager.restore(s2.variables!).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/"it": epoch: expected number, got "x"/);
    expect(restored).toEqual([]);
    expect(s2.variables!.reportUninitialized()).toEqual(["global_step", "w"]);
  });

  it("a registered entry missing from the checkpoint is a NotFoundError unless optional", async () => {
    const s1 = graph().session();
    await s1.variables.initialize();
    const manager = await CheckpointManager.create({ directory: dir });
    await manager.save(s1.variables);
    const required = new ResumableState().register("rng", { save: () => 1, restore: () => undefined });
    await expect(manager.restore(required.wrap(graph().session().variables))).rejects.toThrow(NotFoundError);
    const optional = new ResumableState().register("rng", { save: () => 1, restore: () => undefined }, { optional: true });
    await expect(manager.restore(optional.wrap(graph().session().variables))).resolves.toBe(1);
  });

  it("rejects a name that is empty, taken, or a variable of the session, and an async save()", async () => {
    const state = new ResumableState().register("a", { save: () => 1, restore: () => undefined });
    expect(() => state.register("a", { save: () => 1, restore: () => undefined })).toThrow(ValueError);
    expect(() => state.register("", { save: () => 1, restore: () => undefined })).toThrow(ValueError);
    const clash = new ResumableState().register("w", { save: () => 1, restore: () => undefined });
    expect(() => clash.wrap(graph().session().variables)).toThrow(/"w" are also variables of the session/);
    const asyncSave = new ResumableState().register("p", { save: () => Promise.resolve(1) as unknown as number, restore: () => undefined });
    const store = asyncSave.wrap(graph().session().variables);
    await store.initialize();
    expect(() => store.snapshot()).toThrow(/must be synchronous/);
  });
});
