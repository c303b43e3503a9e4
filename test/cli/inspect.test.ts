/**
 * `monitored-session inspect`: a directory whose state file is bad (reported, exit 1), the step
 * and number of each checkpoint, and the tensors of a checkpoint (TensorFlow's inspect_checkpoint).
 */
import { Command, CommanderError } from "commander";
import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { PassThrough } from "node:stream";
import { beforeEach, describe, expect, it } from "vitest";

import { CheckpointManager, TensorBundleReader } from "../../src/checkpoint/index.js";
import { addInspectCommand, inspectCommand } from "../../src/cli/inspect.js";
import { silentLogger } from "../../src/Logger.js";
import type { VariableStore } from "../../src/session/Session.js";
import { tensor, type TensorValue } from "../../src/session/Tensor.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-ckpt-");

let dir: string;
beforeEach(async () => {
  dir = tempDir();
  const manager = await CheckpointManager.create({ directory: dir, checkpointName: "model.ckpt", logger: silentLogger });
  for (const n of [1, 2]) await manager.save(new Map([["w", tensor("float32", [1], Float32Array.of(n))]]), { checkpointNumber: n });
  await manager.close();
});
/** The CLI's streams, with what was written to each so far. */
const capturedIo = (): { out: PassThrough; err: PassThrough; env: Record<string, string>; isTTY: false; text(): { out: string; err: string } } => {
  const out = new PassThrough();
  const err = new PassThrough();
  let o = "";
  let e = "";
  out.on("data", (d: Buffer) => (o += d.toString()));
  err.on("data", (d: Buffer) => (e += d.toString()));
  return { out, err, env: {}, isTTY: false, text: () => ({ out: o, err: e }) };
};

const inspect = async (json = false, of = dir): Promise<{ code: number; out: string; err: string }> => {
  const io = capturedIo();
  const code = await inspectCommand(of, { json }, io);
  return { code, ...io.text() };
};

/** Saves `ckpt-<n>` of each `[n, tensors]` in a new directory, as a PreemptionCheckpointHandler names them (no step given: the manifest records n). */
const handlerCheckpoints = async (saves: readonly (readonly [number, Record<string, bigint>])[]): Promise<string> => {
  const d = tempDir();
  const manager = await CheckpointManager.create({ directory: d, checkpointName: "ckpt", logger: silentLogger });
  for (const [n, int64s] of saves) {
    const values = new Map<string, TensorValue>([["w", tensor("float32", [2], Float32Array.of(n, -n))]]);
    for (const [name, v] of Object.entries(int64s)) values.set(name, tensor("int64", [], BigInt64Array.of(v)));
    await manager.save(values, { checkpointNumber: n });
  }
  await manager.close();
  return d;
};

/** The (number, step, status) of each checkpoint `inspect --json` lists. */
const listed = async (of: string): Promise<{ number: number | null; step: number | null; status: string }[]> =>
  (JSON.parse((await inspect(true, of)).out) as { number: number | null; step: number | null; status: string }[]).map(({ number, step, status }) => ({ number, step, status }));

describe("inspect: each checkpoint's step and number", () => {
  it("the step is the global step, not the checkpoint's number (a handler numbers its checkpoints by save)", async () => {
    const d = await handlerCheckpoints([
      [2, { global_step: 1200n, checkpointed_runs: 1300n }],
      [3, { global_step: 1679n, checkpointed_runs: 1800n }],
    ]);
    expect(await listed(d)).toEqual([
      { number: 2, step: 1200, status: "ok" },
      { number: 3, step: 1679, status: "ok" },
    ]);
    const text = await inspect(false, d);
    expect(text.out).toMatch(/^\* ckpt-3\s+1679\s+\d+ B\s/m);
  });

  it("without a global step, the run counter (checkpointed_runs); without either, the step the checkpoint recorded", async () => {
    const d = await handlerCheckpoints([[1, { checkpointed_runs: 2000n }]]);
    expect(await listed(d)).toEqual([{ number: 1, step: 2000, status: "ok" }]);
    const io = capturedIo();
    expect(await inspectCommand(d, { allTensorNames: true }, io)).toBe(0);
    expect(io.text().out.split("\n")[0]).toBe(`Tensors of ${d}/ckpt-1 (step 2000; TensorFlow V2 bundle):`);
    // The directory of beforeEach: `w` alone, saved as model.ckpt-1 and -2 with no step given.
    expect(await listed(dir)).toEqual([
      { number: 1, step: 1, status: "ok" },
      { number: 2, step: 2, status: "ok" },
    ]);
  });

  it("a corrupt checkpoint keeps its step while its step tensor verifies", async () => {
    const d = await handlerCheckpoints([[3, { global_step: 1679n }]]);
    const flip = async (tensorName: string): Promise<void> => {
      const entry = (await TensorBundleReader.open(`${d}/ckpt-3`)).entry(tensorName);
      const data = `${d}/ckpt-3.data-00000-of-00001`;
      const bytes = await readFile(data);
      bytes[entry?.offset as number] = (bytes[entry?.offset as number] as number) ^ 0xff;
      await writeFile(data, bytes);
    };
    await flip("w");
    expect(await listed(d)).toEqual([{ number: 3, step: 1679, status: "corrupt" }]);
    await flip("global_step");
    expect(await listed(d)).toEqual([{ number: 3, step: null, status: "corrupt" }]);
  });
});

describe("inspect and the state file", () => {
  it("a healthy directory: all verified, exit 0", async () => {
    const r = await inspect();
    expect(r.out).toContain("2 checkpoints, all verified.");
    expect(r.out).not.toContain("BAD STATE");
    expect(r.code).toBe(0);
  });

  it("a state file naming a missing checkpoint (a dangling entry) is reported and exits 1", async () => {
    await writeFile(`${dir}/checkpoint`, 'model_checkpoint_path: "model.ckpt-3"\nall_model_checkpoint_paths: "model.ckpt-2"\nall_model_checkpoint_paths: "model.ckpt-3"\n');
    const r = await inspect();
    expect(r.out).toContain(`BAD STATE: state file ${dir}/checkpoint names ${dir}/model.ckpt-3, which does not exist`);
    expect(r.code).toBe(1);
  });

  it("an unparseable state file is reported and exits 1 (on stderr with --json, which stays an array of checkpoints)", async () => {
    await writeFile(`${dir}/checkpoint`, "\u0000garbage {{{");
    const r = await inspect();
    expect(r.out).toMatch(new RegExp(`BAD STATE: state file ${dir}/checkpoint is invalid: line 1: expected a field name`));
    expect(r.code).toBe(1);
    const j = await inspect(true);
    expect(JSON.parse(j.out)).toHaveLength(2);
    expect(j.err).toContain("BAD STATE");
    expect(j.code).toBe(1);
  });
});

describe("inspect: the tensors of a checkpoint (TensorFlow's inspect_checkpoint)", () => {
  let ckpt: string;
  beforeEach(async () => {
    ckpt = tempDir();
    const manager = await CheckpointManager.create({ directory: ckpt, checkpointName: "model.ckpt", logger: silentLogger });
    for (const n of [1, 2]) {
      const values = new Map<string, TensorValue>([
        ["dense/kernel", tensor("float32", [2, 3], Float32Array.of(0.1 * n, 0.2, 0.3, -1.5, 2, n))],
        ["global_step", tensor("int64", [], BigInt64Array.of(BigInt(n * 100)))],
        ["vocab", tensor("string", [2], ["a", 'b"c'])],
        ["mask", tensor("bool", [3], Uint8Array.of(1, 0, 1))],
        ["big", tensor("float64", [40, 40], Float64Array.from({ length: 1600 }, (_, i) => i))],
      ]);
      await manager.save(values, { checkpointNumber: n });
    }
    await manager.close();
  });

  /** `monitored-session inspect <args>` through the command's own definition (its flags parsed by commander). */
  const run = async (...args: string[]): Promise<{ code: number; out: string; err: string }> => {
    const io = capturedIo();
    let code = -1;
    const program = new Command("monitored-session").exitOverride().configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => io.err.write(s) });
    addInspectCommand(program, io, (c) => (code = c));
    try {
      await program.parseAsync(["inspect", ...args], { from: "user" });
    } catch (x) {
      if (!(x instanceof CommanderError)) throw x;
      code = 2;
    }
    return { code, ...io.text() };
  };

  it("--all-tensor-names: the name, dtype and shape of every tensor of the directory's latest checkpoint", async () => {
    const r = await run(ckpt, "--all-tensor-names");
    expect(r.code).toBe(0);
    expect(r.out.split("\n")).toEqual([
      // The global step (200), not the checkpoint's number (2).
      `Tensors of ${ckpt}/model.ckpt-2 (step 200; TensorFlow V2 bundle):`,
      expect.stringMatching(/^big {11}float64 {2}\[40, 40\] {2}0x[0-9a-f]{8}$/),
      expect.stringMatching(/^dense\/kernel {2}float32 {2}\[2, 3\] {4}0x[0-9a-f]{8}$/),
      expect.stringMatching(/^global_step {3}int64 {4}\[\] {8}0x[0-9a-f]{8}$/),
      expect.stringMatching(/^mask {10}bool {5}\[3\] {7}0x[0-9a-f]{8}$/),
      expect.stringMatching(/^vocab {9}string {3}\[2\] {7}0x[0-9a-f]{8}$/),
      "",
    ]);
    // The checksums listed are those the index stores (TensorFlow's masked CRC-32C).
    const reader = await TensorBundleReader.open(`${ckpt}/model.ckpt-2`);
    expect(r.out).toContain(`0x${(reader.entry("dense/kernel")?.crc32c as number).toString(16).padStart(8, "0")}`);
    const j = await run(ckpt, "--all-tensor-names", "--json");
    expect(JSON.parse(j.out)).toContainEqual(expect.objectContaining({ name: "dense/kernel", dtype: "float32", shape: [2, 3], sizeBytes: 24, supported: true }));
  });

  it("--tensor-name: one tensor's values, nested by its shape; of the latest, or of the checkpoint prefix given", async () => {
    const latest = await run(ckpt, "--tensor-name", "dense/kernel");
    expect(latest.code).toBe(0);
    // float32 values as their shortest decimal (0.2, not 0.20000000298023224), as numpy prints them
    expect(latest.out).toBe("tensor_name: dense/kernel float32 [2, 3]\n[[0.2, 0.2, 0.3], [-1.5, 2, 2]]\n");
    const first = await run(`${ckpt}/model.ckpt-1`, "--tensor-name", "dense/kernel");
    expect(first.out).toBe("tensor_name: dense/kernel float32 [2, 3]\n[[0.1, 0.2, 0.3], [-1.5, 2, 1]]\n");
    const step = await run(ckpt, "--tensor-name", "global_step", "--json");
    expect(JSON.parse(step.out)).toEqual(expect.objectContaining({ name: "global_step", dtype: "int64", shape: [], values: "200" }));
  });

  it("a checkpoint with an object graph (keys `<name>/.ATTRIBUTES/VARIABLE_VALUE`): its step is still the global step, and --tensor-name takes the variable's name", async () => {
    const d = tempDir();
    const values = new Map<string, TensorValue>([
      ["model/0_dense/kernel", tensor("float32", [2], Float32Array.of(1, 2))],
      ["global_step", tensor("int64", [], BigInt64Array.of(321n))],
    ]);
    const store: VariableStore = {
      names: () => [...values.keys()],
      reportUninitialized: () => [],
      initialize: () => undefined,
      snapshot: () => new Map(values),
      restore: () => undefined,
      objectPaths: () => new Map([["model/0_dense/kernel", ["model/_functional/_operations/1/_kernel"]]]),
    };
    const manager = await CheckpointManager.create({ directory: d, checkpointName: "model.ckpt", logger: silentLogger });
    await manager.save(store, { checkpointNumber: 3 });
    await manager.close();
    expect(await listed(d)).toEqual([{ number: 3, step: 321, status: "ok" }]);
    const r = await run(d, "--tensor-name", "model/0_dense/kernel");
    expect(r.code).toBe(0);
    expect(r.out).toBe("tensor_name: model/0_dense/kernel/.ATTRIBUTES/VARIABLE_VALUE float32 [2]\n[1, 2]\n");
    const names = await run(d, "--all-tensor-names");
    expect(names.out).toContain("global_step/.ATTRIBUTES/VARIABLE_VALUE");
    expect(names.out).toContain("(step 321;");
  });

  it("--all-tensors: every tensor with its values; a large one summarized as numpy does, every value in --json", async () => {
    const r = await run(ckpt, "--all-tensors");
    expect(r.code).toBe(0);
    expect(r.out).toContain('tensor_name: vocab string [2]\n["a", "b\\"c"]\n');
    expect(r.out).toContain("tensor_name: mask bool [3]\n[true, false, true]\n");
    expect(r.out).toContain("tensor_name: global_step int64 []\n200\n");
    expect(r.out).toContain("tensor_name: big float64 [40, 40]\n[[0, 1, 2, ..., 37, 38, 39], [40, 41, 42, ..., 77, 78, 79], [80, 81, 82, ..., 117, 118, 119], ..., [1480, 1481, 1482, ..., 1517, 1518, 1519], ");
    const j = await run(ckpt, "--all-tensors", "--json");
    const big = (JSON.parse(j.out) as { name: string; values: number[][] }[]).find((t) => t.name === "big");
    expect(big?.values).toHaveLength(40);
    expect(big?.values[39]?.[39]).toBe(1599);
  });

  it("one line for each problem: no such checkpoint (with a did-you-mean), no such tensor (with one), no checkpoints, two options; exit 2", async () => {
    const prefix = await run(`${ckpt}/model.ckpt-3`, "--all-tensors");
    expect([prefix.code, prefix.out]).toEqual([2, ""]);
    expect(prefix.err).toBe(`${ckpt}/model.ckpt-3: no such checkpoint (did you mean "${ckpt}/model.ckpt-1"?); ${ckpt} has model.ckpt-1, model.ckpt-2\n`);
    const name = await run(ckpt, "--tensor-name", "dense/kernal");
    expect(name.code).toBe(2);
    expect(name.err).toBe(`${ckpt}/model.ckpt-2: no tensor "dense/kernal" in the checkpoint (did you mean "dense/kernel"?); it has big, dense/kernel, global_step, mask, vocab\n`);
    const empty = tempDir();
    expect(await run(empty, "--all-tensor-names")).toEqual({ code: 2, out: "", err: `${empty}: no checkpoints in the directory\n` });
    const missing = await run(`${empty}/nope/model.ckpt-1`, "--all-tensor-names");
    expect(missing.err).toBe(`${empty}/nope/model.ckpt-1: no such checkpoint directory or checkpoint (no model.ckpt-1.index there)\n`);
    expect(missing.code).toBe(2);
    const both = await run(ckpt, "--all-tensors", "--tensor-name", "big");
    expect(both).toEqual({ code: 2, out: "", err: "monitored-session inspect: give one of --all-tensors, --tensor-name, not both\n" });
    // A prefix without a tensor option: the listing is of directories.
    const listing = await run(`${ckpt}/model.ckpt-1`);
    expect(listing.code).toBe(2);
    expect(listing.err).toContain("a checkpoint, not a directory: list its tensors with --all-tensor-names");
  });

  it("a checkpoint TensorFlow wrote with dtypes this library does not read: verified (ok, exit 0), listed, printed without values", async () => {
    const d = tempDir();
    const fixture = fileURLToPath(new URL("../checkpoint/fixtures/tensorflow/savev2_all_dtypes/", import.meta.url));
    for (const suffix of [".index", ".data-00000-of-00001"]) await cp(join(fixture, `ckpt${suffix}`), join(d, `ckpt-1${suffix}`));
    const listing = await run(d);
    expect(listing.code).toBe(0);
    expect(listing.out).toMatch(/ckpt-1 .*TensorFlow V2 bundle\s+ok/);
    const names = await run(d, "--all-tensor-names");
    expect(names.out).toMatch(/^bfloat16 +bfloat16 +\[2\] +0x[0-9a-f]{8} \(not read by this library\)$/m);
    expect(names.out).toMatch(/^float32 +float32 +\[2, 3\] +0x[0-9a-f]{8}$/m);
    const all = await run(d, "--all-tensors");
    expect(all.code).toBe(0);
    expect(all.out).toContain("tensor_name: bfloat16 bfloat16 [2]\n(bfloat16: not read by this library)\n");
    // Bytes that are not UTF-8 text: listed, saying so, not printed as text.
    expect(all.out).toMatch(/tensor_name: string_binary string \[\d+\]\n\(tensor "string_binary" element \d+ is not UTF-8 text/);
    expect(all.out).toContain("tensor_name: float32 float32 [2, 3]\n[[");
  });

  it("a corrupt checkpoint: its values are refused in one line (exit 1); its names still come from the verified index", async () => {
    const data = `${ckpt}/model.ckpt-2.data-00000-of-00001`;
    const big = (await TensorBundleReader.open(`${ckpt}/model.ckpt-2`)).entry("big");
    const bytes = await readFile(data);
    bytes[(big?.offset as number) + 100] = (bytes[(big?.offset as number) + 100] as number) ^ 0xff;
    await writeFile(data, bytes);
    const r = await run(ckpt, "--tensor-name", "big");
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err.trimEnd().split("\n")).toHaveLength(1);
    // The tensor's checksum is verified before any of its values is printed.
    expect(r.err).toMatch(/model\.ckpt-2\.data-00000-of-00001.*tensor "big": Checksum does not match/);
    expect((await run(ckpt, "--all-tensors")).code).toBe(1);
    expect((await run(ckpt, "--all-tensor-names")).code).toBe(0);
  });
});
