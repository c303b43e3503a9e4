import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as tf from "@tensorflow/tfjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { accuracy, buildModel, classifierLoss } from "../../examples/tfjs-classifier-data.js";
import { NanTensorHook, StopAtStepHook } from "../../hooks/index.js";
import { BundleSaver } from "../../src/checkpoint/index.js";
import {
  FailedPreconditionError,
  InvalidArgumentError,
  NanLossDuringTrainingError,
  OutOfRangeError,
  RuntimeError,
  ValueError,
} from "../../src/errors.js";
import { MonitoredSession, withSession } from "../../src/pipeline/MonitoredSession.js";
import type { TensorValue } from "../../src/session/Tensor.js";
import { silentLogger } from "../../src/Logger.js";
import { InMemoryDataSource, TfjsSession, tfjsSession } from "../../src/tfjs/index.js";
import { bits } from "../util/tensorBits.js";
import { dataset, initialized, makeSession, train } from "../util/tfjsSessions.js";

// Silences the "use tfjs-node" hint. (IS_TEST would also do it, but turns on a kernel leak check
// that tfjs's own softmaxCrossEntropy gradient trips.)
tf.enableProdMode();

let tmp: string;
beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), "tfjs-session-"));
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe("TfjsSession", () => {
  it("names its variables by layer position, not by tfjs's global layer counters", async () => {
    const s = await makeSession();
    const before = s.variables.names();
    buildModel(5).dispose(); // moves the process-wide counters on
    const t = await makeSession();
    expect(t.variables.names()).toEqual(before);
    expect(before).toEqual([
      "model/0_dense/kernel",
      "model/0_dense/bias",
      "model/1_dense/kernel",
      "model/1_dense/bias",
      "optimizer/iterations",
      "optimizer/accBeta1",
      "optimizer/accBeta2",
      "global_step",
      "data/epoch",
      "data/offset",
      "data/rng",
      "data/permutation",
    ]);
    await s.variables.initialize();
    await train(s, 1);
    // Adam's slots appear with its first step: m for every weight, then v.
    expect(s.variables.names().filter((n) => n.includes("slot_"))).toEqual([
      "optimizer/slot_0/0_dense/kernel/m",
      "optimizer/slot_1/0_dense/bias/m",
      "optimizer/slot_2/1_dense/kernel/m",
      "optimizer/slot_3/1_dense/bias/m",
      "optimizer/slot_4/0_dense/kernel/v",
      "optimizer/slot_5/0_dense/bias/v",
      "optimizer/slot_6/1_dense/kernel/v",
      "optimizer/slot_7/1_dense/bias/v",
    ]);
    expect(s.variables.names("local")).toEqual([]);
    s.close();
    t.close();
  });

  it("names() lists every fetchable name (ops, metrics, variables), even before initialization", async () => {
    const s = await makeSession();
    const names = s.names();
    expect(names.slice(0, 3)).toEqual(["train", "loss", "accuracy"]);
    expect(names).toEqual(expect.arrayContaining([...s.variables.names(), "global_step"]));
    for (const n of names) expect(n.length).toBeGreaterThan(0);
    s.close();
  });

  it("starts uninitialized; initialize() makes it ready and refuses nothing afterwards", async () => {
    const s = await makeSession();
    expect(s.variables.reportUninitialized()).toEqual(s.variables.names());
    await expect(s.run("train")).rejects.toThrow(FailedPreconditionError);
    expect(() => s.variables.snapshot()).toThrow(/uninitialized value model\/0_dense\/kernel/);
    await s.variables.initialize();
    expect(s.variables.reportUninitialized()).toEqual([]);
    expect(await s.run("global_step")).toBe(0);
    s.close();
  });

  it("trains under MonitoredSession with StopAtStepHook and NanTensorHook, and the loss decreases", async () => {
    let session: TfjsSession | undefined;
    const losses: number[] = [];
    await withSession(
      {
        logger: silentLogger,
        sessionCreator: {
          createSession: async () => (session = await initialized()),
        },
        hooks: [new StopAtStepHook({ lastStep: 120 }), new NanTensorHook({ lossTensor: "loss" })],
      },
      async (sess) => {
        while (!sess.shouldStop()) losses.push((await sess.run("train")) as number);
      },
    );
    expect(losses).toHaveLength(120);
    await expect((session as TfjsSession).run("global_step")).rejects.toThrow(RuntimeError);
    const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
    expect(mean(losses.slice(0, 10))).toBeGreaterThan(0.5);
    expect(mean(losses.slice(-10))).toBeLessThan(0.25 * mean(losses.slice(0, 10)));
  });

  it("NanTensorHook stops a diverging model with NanLossDuringTrainingError", async () => {
    const sess = await MonitoredSession.create({
      logger: silentLogger,
      sessionCreator: {
        createSession: () => initialized({ lossFn: (y, p) => tf.mul(classifierLoss(y, p), NaN) }),
      },
      hooks: [new NanTensorHook({ lossTensor: "loss" })],
    });
    await expect(sess.run("train")).rejects.toThrow(NanLossDuringTrainingError);
    await sess.close().catch(() => undefined);
  });

  it("mirrors nested fetch structures; loss, metrics and train agree within a step; variables read before the step", async () => {
    const s = await initialized({ summaries: { lr: () => 0.02, kernel_sum: ({ model }) => tf.sum(model.getWeights()[0] as tf.Tensor) } });
    await train(s, 3);
    const out = await s.run({ t: "train", nested: ["loss", { acc: "accuracy", none: null }], step: "global_step", lr: "lr", k: "kernel_sum" });
    expect(Object.keys(out)).toEqual(["t", "nested", "step", "lr", "k"]);
    expect(out.step).toBe(3);
    expect(out.nested[0]).toBe(out.t);
    expect(typeof out.t).toBe("number");
    expect(out.nested[1]).toEqual({ acc: expect.any(Number), none: null });
    expect(out.lr).toBe(0.02);
    const kernel = (await s.run("model/0_dense/kernel")) as TensorValue;
    expect(kernel.dtype).toBe("float32");
    expect(kernel.shape).toEqual([2, 16]);
    expect(out.k).toBeCloseTo((kernel.data as Float32Array).reduce((a, b) => a + b, 0), 4);
    expect(await s.run(["global_step", []])).toEqual([4, []]);
    s.close();
  });

  it("runMaybeSync: the first step answers with a promise (the optimizer's new slots are listed after it), later ones synchronously, with run's bits", async () => {
    const viaRun = await initialized();
    const viaSync = await initialized();
    const first = viaSync.runMaybeSync(["train", "accuracy"]);
    expect(first).toBeInstanceOf(Promise);
    const losses: unknown[] = [await first];
    for (let i = 0; i < 5; i++) {
      const r = viaSync.runMaybeSync(["train", "accuracy"]);
      expect(r).not.toBeInstanceOf(Promise);
      losses.push(r);
    }
    const reference: unknown[] = [];
    for (let i = 0; i < 6; i++) reference.push(await viaRun.run(["train", "accuracy"]));
    expect(losses).toEqual(reference);
    expect(bits(viaSync.variables.snapshot())).toEqual(bits(viaRun.variables.snapshot()));
    // Errors are thrown, not returned: what run would reject with.
    expect(() => viaSync.runMaybeSync("nope")).toThrow(InvalidArgumentError);
    viaSync.close();
    expect(() => viaSync.runMaybeSync("train")).toThrow("Attempted to use a closed Session.");
    viaRun.close();
  });

  it("evaluates loss and metrics without train on the fed batch, else on the last training batch", async () => {
    const s = await initialized();
    await expect(s.run("loss")).rejects.toThrow(FailedPreconditionError);
    // Three well-separated points of each class: evaluation does not train or move the data.
    const before = bits(s.variables.snapshot());
    const fed = await s.run(["loss", "accuracy"], { xs: [[-2, -1], [2, -1], [0, 2]], ys: [0, 1, 2] });
    expect(fed[0]).toBeGreaterThan(0);
    expect(bits(s.variables.snapshot())).toEqual(before);
    const fedTensors = { xs: tf.tensor2d([[-2, -1]]), ys: tf.tensor1d([0]) };
    expect(await s.run("loss", fedTensors)).toBeCloseTo(
      tf.tidy(() => classifierLoss(fedTensors.ys, s.model.predict(fedTensors.xs) as tf.Tensor).dataSync()[0] as number),
      6,
    );
    expect(fedTensors.xs.isDisposed).toBe(false); // the caller's tensors stay the caller's
    tf.dispose([fedTensors.xs, fedTensors.ys]);

    const stepLoss = (await s.run("train")) as number;
    const after = (await s.run("loss")) as number; // the same batch, after the update
    expect(after).not.toBe(stepLoss);
    expect(after).toBeLessThan(stepLoss);
    expect(await s.run("loss")).toBe(after);
    s.close();
  });

  it("snapshot → restore into a new session reproduces weights, optimizer slots, step and data cursor bit for bit", async () => {
    const a = await initialized();
    await train(a, 17);
    const snap = a.variables.snapshot();
    const b = await makeSession();
    await b.variables.restore(snap);
    expect(b.variables.reportUninitialized()).toEqual([]);
    expect(bits(b.variables.snapshot())).toEqual(bits(snap));
    // And they go on identically, including the batches they take.
    expect(await train(b, 5)).toEqual(await train(a, 5));
    expect(bits(b.variables.snapshot())).toEqual(bits(a.variables.snapshot()));
    a.close();
    b.close();
  });

  it("exact-step resume: N steps straight = k steps + BundleSaver checkpoint + a brand new session + N-k steps", async () => {
    const N = 40;
    const k = 23; // mid second epoch (180 examples, batches of 16)
    const straight = await initialized();
    const straightLosses = await train(straight, N);

    const first = await initialized();
    const firstLosses = await train(first, k);
    const saver = new BundleSaver();
    const prefix = join(tmp, "resume.ckpt");
    await saver.save(first.variables, prefix, { step: k });
    first.close();

    buildModel(9).dispose(); // the new process's counters differ; names must not
    const second = await makeSession();
    await second.variables.restore((await saver.restore(prefix)).values);
    expect(await second.run("global_step")).toBe(k);
    const secondLosses = await train(second, N - k);

    expect([...firstLosses, ...secondLosses]).toEqual(straightLosses);
    expect(bits(second.variables.snapshot())).toEqual(bits(straight.variables.snapshot()));
    straight.close();
    second.close();
  });

  it("initialize() restarts from the creation state, as a re-created session does", async () => {
    const fresh = await initialized();
    const initial = bits(fresh.variables.snapshot());
    const s = await initialized();
    await train(s, 12);
    await s.variables.initialize();
    expect(bits(s.variables.snapshot())).toEqual(initial);
    expect(await train(s, 3)).toEqual(await train(fresh, 3));
    fresh.close();
    s.close();
  });

  it("does not leak tensors over 300 steps with snapshots, fetches, evaluations and restores", async () => {
    const s = await initialized();
    await train(s, 2);
    const step = async (i: number) => {
      await s.run({ t: "train", l: "loss", a: "accuracy", s: "global_step" });
      if (i % 10 === 0) await s.run(["loss", "model/1_dense/bias"], { xs: [[0, 0]], ys: [1] });
      if (i % 25 === 0) await s.variables.restore(s.variables.snapshot());
      if (i % 100 === 0) await s.variables.initialize();
    };
    await step(0);
    const baseline = tf.memory().numTensors;
    for (let i = 1; i <= 300; i++) await step(i);
    expect(tf.memory().numTensors).toBe(baseline);
    s.close();
  });

  it("does not leak the gradient tape's tensors when the loss or a metric throws during a train step", async () => {
    let fail: "loss" | "metric" | undefined;
    const s = await initialized({
      lossFn: (y, p) => {
        if (fail === "loss") throw new Error("loss boom");
        return classifierLoss(y, p);
      },
      metrics: {
        accuracy,
        flaky: (y, p) => {
          if (fail === "metric") throw new Error("metric boom");
          return accuracy(y, p);
        },
      },
    });
    await train(s, 2);
    const baseline = tf.memory().numTensors;
    for (const what of ["loss", "metric"] as const) {
      fail = what;
      await expect(s.run(["train", "flaky"])).rejects.toThrow(`${what} boom`);
      fail = undefined;
    }
    expect(tf.memory().numTensors).toBe(baseline);
    expect(await s.run("global_step")).toBe(2);
    await train(s, 2);
    expect(tf.memory().numTensors).toBe(baseline);
    s.close();
  });

  it("trains with plain SGD (no slots) and with a compiled model's optimizer and loss", async () => {
    const sgd = await initialized({ optimizer: tf.train.sgd(0.1) });
    await train(sgd, 3);
    expect(sgd.variables.names().some((n) => n.includes("slot_"))).toBe(false);
    const b = await makeSession({ optimizer: tf.train.sgd(0.1) });
    await b.variables.restore(sgd.variables.snapshot());
    expect(await train(b, 2)).toEqual(await train(sgd, 2));

    const model = buildModel(1);
    model.compile({ optimizer: tf.train.adam(0.01), loss: "meanSquaredError" });
    const compiled = await tfjsSession({
      model,
      data: new InMemoryDataSource({ xs: dataset.xs, ys: Array.from(dataset.ys.data, (c) => [0, 1, 2].map((j) => (j === c ? 1 : 0))), batchSize: 8 }),
    });
    await compiled.variables.initialize();
    expect(typeof (await compiled.run("train"))).toBe("number");
    expect(compiled.optimizer).toBe(model.optimizer);
    for (const s of [sgd, b, compiled]) s.close();
  });

  it("ends a finite data source with OutOfRangeError, leaving the step unchanged", async () => {
    const s = await initialized({ data: new InMemoryDataSource({ xs: dataset.xs, ys: dataset.ys, batchSize: 90, epochs: 1 }) });
    await train(s, 2);
    await expect(s.run("train")).rejects.toThrow(OutOfRangeError);
    expect(await s.run("global_step")).toBe(2);
    s.close();
  });

  it("exportModelArtifacts writes model.json + weights.bin that tf.loadLayersModel loads", async () => {
    const s = await initialized();
    await train(s, 5);
    const dir = join(tmp, "export");
    const { modelJsonPath, weightsPath } = await s.exportModelArtifacts(dir);
    const json = JSON.parse(await readFile(modelJsonPath, "utf8")) as tf.io.ModelJSON;
    const weights = await readFile(weightsPath);
    expect(json.weightsManifest[0]?.paths).toEqual(["weights.bin"]);
    const loaded = await tf.loadLayersModel(
      tf.io.fromMemory({
        modelTopology: json.modelTopology,
        weightSpecs: json.weightsManifest[0]?.weights ?? [],
        weightData: weights.buffer.slice(weights.byteOffset, weights.byteOffset + weights.byteLength),
      }),
    );
    const x = tf.tensor2d([[0.5, -1], [1, 2]]);
    const want = s.model.predict(x) as tf.Tensor;
    const got = loaded.predict(x) as tf.Tensor;
    expect(Array.from(got.dataSync())).toEqual(Array.from(want.dataSync()));
    tf.dispose([x, want, got]);
    loaded.dispose();
    s.close();
  });

  describe("bad input gives clear errors", () => {
    it("unknown fetches and feeds", async () => {
      const s = await initialized();
      await expect(s.run(["train", "nope"])).rejects.toThrow(InvalidArgumentError);
      await expect(s.run("nope")).rejects.toThrow(/Fetch "nope" is not an op or variable of this session \(ops: train, loss, accuracy/);
      await expect(s.run("loss", { x: [[1, 2]] })).rejects.toThrow(/Cannot feed "x": this session accepts feeds "xs" and "ys"/);
      await expect(s.run("loss", { xs: [[1, 2]] })).rejects.toThrow(/Feed "xs" and "ys" together/);
      await expect(s.run("loss", { xs: [1, 2], ys: [0, 1] })).rejects.toThrow(/xs has shape \[2\] but the model takes \[null, 2\]/);
      await expect(s.run("loss", { xs: [[1, 2]], ys: [0, 1] })).rejects.toThrow(/xs has 1 examples but ys has 2/);
      await expect(s.run("loss", { xs: "text", ys: [0] })).rejects.toThrow(InvalidArgumentError);
      expect(await s.run("global_step")).toBe(0); // nothing trained
      s.close();
    });

    it("mismatched restores change nothing", async () => {
      const s = await initialized();
      await train(s, 3);
      const good = s.variables.snapshot();
      const before = bits(good);
      const variant = (f: (m: Map<string, TensorValue>) => void) => {
        const m = new Map(good);
        f(m);
        return m;
      };
      const cases: [Map<string, TensorValue>, RegExp][] = [
        [variant((m) => m.set("model/9_dense/kernel", good.get("model/0_dense/kernel") as TensorValue)), /Checkpoint has variable "model\/9_dense\/kernel" that the session does not/],
        [variant((m) => m.set("model/0_dense/kernel", { dtype: "float32", shape: [3, 16], data: new Float32Array(48) })), /"model\/0_dense\/kernel": shape mismatch: expected \[2, 16\], got \[3, 16\]/],
        [variant((m) => m.set("model/0_dense/bias", { dtype: "float64", shape: [16], data: new Float64Array(16) })), /"model\/0_dense\/bias" is float32 but the checkpoint holds float64/],
        [variant((m) => m.set("global_step", { dtype: "int32", shape: [], data: Int32Array.of(1) })), /"global_step" is int64/],
        [variant((m) => m.delete("optimizer/iterations")), /optimizer is restored as a whole; the checkpoint lacks "optimizer\/iterations"/],
        [variant((m) => m.delete("optimizer/accBeta1")), /lacks "optimizer\/accBeta1"/],
        [variant((m) => m.delete("optimizer/slot_3/1_dense/bias/m")), /skip slot_3/],
        [variant((m) => m.set("optimizer/slot_0/0_dense/kernel/m", { dtype: "float32", shape: [16], data: new Float32Array(16) })), /slot "optimizer\/slot_0\/0_dense\/kernel\/m" is float32\[16\] but its weight is float32\[2, 16\]/],
        [variant((m) => m.delete("data/rng")), /data position is restored as a whole; the checkpoint lacks "data\/rng"/],
        [variant((m) => m.set("data/offset", { dtype: "int64", shape: [], data: BigInt64Array.of(1000n) })), /data source "offset" = 1000 is outside/],
      ];
      for (const [values, message] of cases) {
        await expect(s.variables.restore(values)).rejects.toThrow(InvalidArgumentError);
        await expect(s.variables.restore(values)).rejects.toThrow(message);
        expect(bits(s.variables.snapshot())).toEqual(before);
      }
      s.close();
    });

    it("a model or optimizer that cannot be checkpointed, and clashing names", async () => {
      await expect(makeSession({ optimizer: tf.train.adamax(0.01) })).rejects.toThrow(/optimizer Adamax cannot report its state/);
      await expect(makeSession({ metrics: { loss: accuracy } })).rejects.toThrow(ValueError);
      await expect(makeSession({ globalStepName: "train" })).rejects.toThrow(/"train" names two things/);
      await expect(tfjsSession({ model: buildModel(1), data: new InMemoryDataSource({ xs: dataset.xs, ys: dataset.ys, batchSize: 8 }) })).rejects.toThrow(/needs an optimizer/);
      await expect(makeSession({ lossFn: undefined as never })).rejects.toThrow(/needs a loss/);
    });
  });
});
