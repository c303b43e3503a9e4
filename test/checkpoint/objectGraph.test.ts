/**
 * TensorFlow 2's object graph: decoding the graphs TensorFlow wrote (committed Keras 3 fixtures),
 * writing ours (keys, shared nodes, conflicts), reading our own checkpoints back by name, the
 * restore by object path, and hostile graphs (truncation at every byte, a seeded fuzz, lying
 * node ids): each a one-line DataLossError naming the file and offset, never a crash.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

import { BundleSaver } from "../../src/checkpoint/Saver.js";
import { OBJECT_GRAPH_TENSOR, readBundle, readCheckpointInfo } from "../../src/checkpoint/checkpointFormat.js";
import { ObjectGraph, planObjectGraph, restoreInto, VARIABLE_VALUE_SUFFIX } from "../../src/checkpoint/objectGraph.js";
import { decodeObjectGraph, encodeObjectGraph, MAX_GRAPH_ITEMS, type TrackableObject } from "../../src/checkpoint/tensorBundle/objectGraphProto.js";
import { TensorBundleReader } from "../../src/checkpoint/tensorBundle/TensorBundleReader.js";
import { TensorBundleWriter } from "../../src/checkpoint/tensorBundle/TensorBundleWriter.js";
import { DataLossError, InvalidArgumentError } from "../../src/errors.js";
import type { ObjectPaths, VariableRestoreOptions, VariableStore } from "../../src/session/Session.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { seededRandom } from "../util/seed.js";
import { useTempDirs } from "../util/tempDirs.js";
import { dataLossOf } from "./tensorBundle/dataLoss.js";

const FIXTURES = fileURLToPath(new URL("fixtures/tensorflow/", import.meta.url));
const tempDir = useTempDirs("ms-object-graph-");

const graphOf = async (prefix: string): Promise<Uint8Array> => {
  const reader = await TensorBundleReader.open(prefix);
  return (await reader.readStringBytes(OBJECT_GRAPH_TENSOR))[0] as Uint8Array;
};
const AT = { file: "/x/ckpt.data-00000-of-00001", offset: 100 };

const f32 = (...v: number[]): TensorValue => ({ dtype: "float32", shape: [v.length], data: Float32Array.from(v) });
const i64 = (n: number): TensorValue => ({ dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(n)) });

describe("graphs TensorFlow wrote (Keras 3.15, TensorFlow 2.21)", () => {
  it("resolve a Keras path to its key, through whichever edge TensorFlow chose for the key", async () => {
    const uncompiled = ObjectGraph.decode(await graphOf(join(FIXTURES, "keras3_uncompiled/ckpt")), AT);
    expect(uncompiled.keyAt("model/_functional/_operations/1/_kernel")).toBe(`model/_functional/_operations/1/_kernel${VARIABLE_VALUE_SUFFIX}`);
    expect(uncompiled.keyAt("model/_functional/_operations/2/bias")).toBe(`model/_functional/_operations/2/bias${VARIABLE_VALUE_SUFFIX}`);
    expect(uncompiled.keyAt("model/optimizer/_iterations")).toBeUndefined();
    expect(uncompiled.keyAt("model/_functional")).toBeUndefined(); // an object, not a value
    expect(uncompiled.keyAt("model/nothing/here")).toBeUndefined();

    // Compiled: the kernel's key is its path through the optimizer; the layer's path reaches it too.
    const compiled = ObjectGraph.decode(await graphOf(join(FIXTURES, "keras3_sequential/ckpt")), AT);
    expect(compiled.keyAt("model/_functional/_operations/1/_kernel")).toBe(`model/optimizer/_trainable_variables/0${VARIABLE_VALUE_SUFFIX}`);
    expect(compiled.keyAt("model/optimizer/_iterations")).toBe(`model/optimizer/_iterations${VARIABLE_VALUE_SUFFIX}`);
    expect(compiled.keyAt("model/optimizer/_variables/9")).toBe(`model/optimizer/_variables/9${VARIABLE_VALUE_SUFFIX}`);
  });

  it("readBundle gives a checkpoint TensorFlow wrote its keys as they are, with its graph", async () => {
    const contents = await readBundle(join(FIXTURES, "keras3_sequential/ckpt"));
    expect(contents.objectGraph).toBeInstanceOf(ObjectGraph);
    expect([...contents.values.keys()]).toContain(`model/optimizer/_iterations${VARIABLE_VALUE_SUFFIX}`);
    // A bundle without a graph has none.
    expect((await readBundle(join(FIXTURES, "saver_v1/model.ckpt-5"))).objectGraph).toBeUndefined();
  });

  it("re-encoding a decoded graph gives TensorFlow's bytes", async () => {
    for (const name of ["keras3_uncompiled", "keras3_sequential", "checkpoint_v2"]) {
      const bytes = await graphOf(join(FIXTURES, `${name}/ckpt`));
      expect(Buffer.from(encodeObjectGraph(decodeObjectGraph(bytes, AT))).equals(Buffer.from(bytes)), name).toBe(true);
    }
  });
});

describe("planObjectGraph", () => {
  it("keys every variable with the suffix, shares one node per variable, and puts a variable without paths at its name", () => {
    const paths: ObjectPaths = new Map([
      ["w", ["model/layer/_kernel", "model/optimizer/_trainable_variables/0"]],
      ["b", ["model/layer/bias"]],
    ]);
    const planned = planObjectGraph(["w", "b", "global_step"], paths);
    expect(planned.keys.get("w")).toBe(`w${VARIABLE_VALUE_SUFFIX}`);
    const graph = ObjectGraph.decode(planned.graph, AT);
    expect(graph.keyAt("model/layer/_kernel")).toBe(`w${VARIABLE_VALUE_SUFFIX}`);
    expect(graph.keyAt("model/optimizer/_trainable_variables/0")).toBe(`w${VARIABLE_VALUE_SUFFIX}`);
    expect(graph.keyAt("model/layer/bias")).toBe(`b${VARIABLE_VALUE_SUFFIX}`);
    expect(graph.keyAt("global_step")).toBe(`global_step${VARIABLE_VALUE_SUFFIX}`);
    const nodes = decodeObjectGraph(planned.graph, AT);
    // root, model, layer, w, b, optimizer, _trainable_variables, global_step
    expect(nodes).toHaveLength(8);
    expect(nodes.every((n) => n.hasCheckpointValues === true)).toBe(true);
    expect(nodes.filter((n) => n.attributes.length === 1).map((n) => n.attributes[0]?.fullName).sort()).toEqual(["b", "global_step", "w"]);
  });

  it("refuses two variables at one path, naming both", () => {
    const paths: ObjectPaths = new Map([
      ["a", ["model/x"]],
      ["b", ["model/x"]],
    ]);
    expect(() => planObjectGraph(["a", "b"], paths)).toThrow(InvalidArgumentError);
    expect(() => planObjectGraph(["a", "b"], paths)).toThrow(/"a" and "b" both claim the object path "model\/x"/);
  });

  it("a variable may sit above others (a name that is another's prefix)", () => {
    const graph = ObjectGraph.decode(planObjectGraph(["a", "a/b"], new Map()).graph, AT);
    expect(graph.keyAt("a")).toBe(`a${VARIABLE_VALUE_SUFFIX}`);
    expect(graph.keyAt("a/b")).toBe(`a/b${VARIABLE_VALUE_SUFFIX}`);
  });
});

describe("our checkpoints with object paths", () => {
  /** A store with object paths that records what it was given. */
  const storeWith = (paths: ObjectPaths, values: Map<string, TensorValue>): VariableStore & { readonly got: { values?: ReadonlyMap<string, TensorValue>; options?: VariableRestoreOptions } } => {
    const got: { values?: ReadonlyMap<string, TensorValue>; options?: VariableRestoreOptions } = {};
    return {
      got,
      names: () => [...values.keys()],
      reportUninitialized: () => [],
      initialize: () => undefined,
      snapshot: () => new Map(values),
      restore: (v, options) => {
        got.values = v;
        if (options !== undefined) got.options = options;
      },
      objectPaths: () => paths,
    };
  };
  const PATHS: ObjectPaths = new Map([
    ["model/0_dense/kernel", ["model/_functional/_operations/1/_kernel"]],
    ["optimizer/iterations", ["model/optimizer/_iterations"]],
  ]);
  const VALUES = new Map([
    ["model/0_dense/kernel", f32(1.5, -2)],
    ["optimizer/iterations", i64(7)],
    ["global_step", i64(7)],
  ]);

  it("are keyed as TensorFlow 2 keys them, carry the graph, and restore by name", async () => {
    const prefix = join(tempDir(), "model.ckpt-7");
    const store = storeWith(PATHS, VALUES);
    await new BundleSaver().save(store, prefix, { step: 7 });
    const info = await readCheckpointInfo(prefix);
    expect(info.tensors.map((t) => t.name)).toEqual([`global_step${VARIABLE_VALUE_SUFFIX}`, `model/0_dense/kernel${VARIABLE_VALUE_SUFFIX}`, `optimizer/iterations${VARIABLE_VALUE_SUFFIX}`]);
    const reader = await TensorBundleReader.open(prefix);
    expect(reader.entry(OBJECT_GRAPH_TENSOR)?.dtype).toBe("string");
    const contents = await readBundle(prefix);
    expect(contents.objectGraph).toBeUndefined();
    expect([...contents.values.keys()].sort()).toEqual([...VALUES.keys()].sort());
    expect(contents.values.get("model/0_dense/kernel")?.data).toEqual(Float32Array.of(1.5, -2));
    await restoreInto(store, contents);
    expect(store.got.options).toBeUndefined();
    expect([...(store.got.values?.keys() ?? [])].sort()).toEqual([...VALUES.keys()].sort());
  });

  it("the step of a TensorFlow 2 checkpoint is its global_step/.ATTRIBUTES/VARIABLE_VALUE", async () => {
    const prefix = join(tempDir(), "ckpt-1");
    await new TensorBundleWriter(prefix).add(`global_step${VARIABLE_VALUE_SUFFIX}`, i64(1234)).add(`w${VARIABLE_VALUE_SUFFIX}`, f32(1)).finish();
    expect((await readCheckpointInfo(prefix)).step).toBe(1234);
  });

  it("a store without object paths is keyed by name, with no graph", async () => {
    const prefix = join(tempDir(), "plain-1");
    await new BundleSaver().save(VALUES, prefix, { step: 1 });
    expect((await readCheckpointInfo(prefix)).tensors.map((t) => t.name)).toEqual(["global_step", "model/0_dense/kernel", "optimizer/iterations"]);
    expect((await TensorBundleReader.open(prefix)).entry(OBJECT_GRAPH_TENSOR)).toBeUndefined();
  });

  it("a checkpoint TensorFlow wrote restores by path, telling the store so; a graph of another model is refused", async () => {
    const contents = await readBundle(join(FIXTURES, "keras3_sequential/ckpt"));
    const store = storeWith(PATHS, VALUES);
    await restoreInto(store, contents);
    expect(store.got.options).toEqual({ fromObjectGraph: true });
    expect([...(store.got.values?.keys() ?? [])].sort()).toEqual(["model/0_dense/kernel", "optimizer/iterations"]);
    expect(store.got.values?.get("model/0_dense/kernel")?.shape).toEqual([3, 4]);
    expect((store.got.values?.get("optimizer/iterations")?.data as BigInt64Array)[0]).toBe(1n);

    const other = storeWith(new Map([["w", ["model/_operations/5/_kernel"]]]), new Map());
    await expect(restoreInto(other, contents)).rejects.toThrow(/holds none of this session's object paths \(such as "model\/_operations\/5\/_kernel"\)/);
  });
});

describe("hostile graphs", () => {
  const good = planObjectGraph(["a/b", "c"], new Map([["a/b", ["x/y/z", "x/w"]]])).graph;

  it("truncated at every byte: a DataLossError at an offset inside the graph, or the graph's valid prefix", () => {
    for (let cut = 0; cut < good.length; cut++) {
      try {
        decodeObjectGraph(good.subarray(0, cut), AT);
      } catch (e) {
        const { offset } = dataLossOf(AT.file, () => {
          throw e;
        });
        expect(offset).toBeGreaterThanOrEqual(AT.offset);
        expect(offset).toBeLessThanOrEqual(AT.offset + cut);
      }
    }
  });

  it("a child naming a node the graph lacks, and an empty graph, are DataLossErrors", () => {
    const lying: TrackableObject[] = [{ children: [{ nodeId: 5, localName: "model" }], attributes: [] }];
    expect(dataLossOf(AT.file, () => decodeObjectGraph(encodeObjectGraph(lying), AT)).message).toMatch(/names node 5, but the graph has 1 nodes/);
    const negative: TrackableObject[] = [{ children: [{ nodeId: -1, localName: "model" }], attributes: [] }];
    dataLossOf(AT.file, () => decodeObjectGraph(encodeObjectGraph(negative), AT));
    dataLossOf(AT.file, () => decodeObjectGraph(new Uint8Array(0), AT));
  });

  it("a seeded fuzz of overwritten bytes: a graph or a DataLossError, and keyAt never throws", async () => {
    const { next: random, seed } = seededRandom("object graph fuzz");
    const keras = await graphOf(join(FIXTURES, "keras3_sequential/ckpt"));
    const outcomes = { decoded: 0, dataLoss: 0 };
    for (let i = 0; i < 2000; i++) {
      const source = i % 2 === 0 ? good : keras;
      const bytes = Uint8Array.from(source);
      for (let k = 0; k < 1 + Math.floor(random() * 3); k++) bytes[Math.floor(random() * bytes.length)] = Math.floor(random() * 256);
      let graph: ObjectGraph;
      try {
        graph = ObjectGraph.decode(bytes, AT);
      } catch (e) {
        expect(e, `seed ${seed}, case ${i}`).toBeInstanceOf(DataLossError);
        expect((e as Error).message).not.toContain("\n");
        outcomes.dataLoss++;
        continue;
      }
      outcomes.decoded++;
      for (const path of ["x/y/z", "x/w", "c", "model/_functional/_operations/1/_kernel", "model/optimizer/_variables/9"]) graph.keyAt(path);
    }
    console.log(`[fuzz outcomes] ${JSON.stringify(outcomes)}`);
    expect(outcomes.dataLoss).toBeGreaterThan(0);
  });

  it("more nodes, children and attributes than MAX_GRAPH_ITEMS is a DataLossError, not gigabytes of objects", () => {
    // Each empty node is two bytes of input.
    const many = new Uint8Array(2 * (MAX_GRAPH_ITEMS + 1));
    for (let i = 0; i < many.length; i += 2) many[i] = 0x0a;
    expect(dataLossOf(AT.file, () => decodeObjectGraph(many, AT)).message).toMatch(/more than 2097152 nodes, children and attributes/);
  });

  it("a graph tensor that is not a string scalar is a DataLossError naming the index", async () => {
    const prefix = join(tempDir(), "ckpt");
    await new TensorBundleWriter(prefix).add(OBJECT_GRAPH_TENSOR, f32(1)).add("w", f32(2)).finish();
    await expect(readBundle(prefix)).rejects.toThrow(DataLossError);
    await expect(readBundle(prefix)).rejects.toThrow(/_CHECKPOINTABLE_OBJECT_GRAPH is float32\[1\], not a whole string scalar/);
  });
});
