/** Shared helpers of the checkpoint tests: file listing and a gated saver. */

import { readdir } from "node:fs/promises";

import { BundleSaver, type Saver, type SaveSource, type SaverSaveOptions } from "../../src/checkpoint/index.js";
import type { TensorValue } from "../../src/session/Tensor.js";

/** The file names in `dir`, sorted. */
export const ls = async (dir: string): Promise<string[]> => (await readdir(dir)).sort();

/**
 * A {@link BundleSaver} whose saves wait for `release()` (one gate per save, in order), and
 * that can be told to fail the next saves.
 */
export class GatedSaver extends BundleSaver implements Saver {
  private gates: (() => void)[] = [];
  private waiting: (() => void)[] = [];
  failNext = 0;
  readonly started: string[] = [];
  private readonly writes: Promise<unknown>[] = [];

  override save(values: SaveSource, prefix: string, options?: SaverSaveOptions): Promise<string> {
    this.started.push(prefix);
    const gate = new Promise<void>((resolve) => {
      this.gates.push(resolve);
    });
    for (const w of this.waiting.splice(0)) w();
    const fail = this.failNext > 0;
    if (fail) this.failNext--;
    // The values were snapshotted by the manager already; write them after the gate opens.
    const write = gate.then(() => {
      if (fail) throw new Error(`injected failure writing ${prefix}`);
      return super.save(values, prefix, options);
    });
    this.writes.push(write.catch(() => undefined));
    return write;
  }

  /** Resolves once every save started so far has finished writing (or failed). */
  async idle(): Promise<void> {
    await Promise.all(this.writes);
  }

  /** Lets the oldest waiting save proceed. */
  release(): void {
    const g = this.gates.shift();
    if (g === undefined) throw new Error("no save is waiting");
    g();
  }

  /** Resolves once `n` saves have started in total. */
  async waitStarted(n: number): Promise<void> {
    while (this.started.length < n) {
      await new Promise<void>((resolve) => {
        this.waiting.push(resolve);
      });
    }
  }
}

/**
 * What `model.ckpt-<n>` of test/checkpoint/fixtures/monitored-session-v1 holds (its README's
 * table), for n = 3 and 7; other n give the same variables with other values.
 */
export const v1FixtureValues = (n: number): Map<string, TensorValue> =>
  new Map<string, TensorValue>([
    ["dense/kernel", { dtype: "float32", shape: [2, 2], data: Float32Array.of(n, 2, -0, Number.NaN) }],
    ["dense/bias", { dtype: "float64", shape: [2], data: Float64Array.of(0.1, -Infinity) }],
    ["global_step", { dtype: "int64", shape: [], data: BigInt64Array.of(BigInt(n * 100)) }],
    ["counts", { dtype: "int32", shape: [2], data: Int32Array.of(-2147483648, 2147483647) }],
    ["mask", { dtype: "bool", shape: [3], data: Uint8Array.of(1, 0, 1) }],
    ["vocab", { dtype: "string", shape: [3], data: ["a", "", "Grüße ✓"] }],
  ]);
