/**
 * A TensorFlow.js optimizer's state as checkpoint variables: `optimizer/iterations`, the
 * slots `getWeights()` reports (Adam's `m` and `v`), and the tf variables it holds outside
 * `getWeights()` (Adam's beta powers `accBeta1`/`accBeta2`, which `setWeights` would otherwise
 * recompute with `pow`, losing bit-exactness). The state is restored as a whole: validated
 * first ({@link OptimizerState.plan}), then applied ({@link OptimizerState.apply}).
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

import { InvalidArgumentError, ValueError } from "../../errors.js";
import type { DType, TensorValue } from "../../session/Tensor.js";
import { slotName, tfName, weightShape, type ModelWeight } from "./naming.js";
import { expectLike, fromTf, int64, int64Value, sameShape, toTf } from "./tensors.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A validated optimizer state, ready to apply. */
export interface OptimizerPlan {
  readonly iter: number;
  readonly hidden: readonly (readonly [field: string, value: TensorValue])[];
  /** Slots by position, with the tfjs name `setWeights` expects. */
  readonly slots: readonly (readonly [tfjsName: string, value: TensorValue])[];
}

/** An optimizer slot variable (an entry of `getWeights()` after `iter`). */
interface Slot {
  readonly name: string;
  readonly tensor: tf.Tensor;
}

/** An entry of `optimizer.getWeights()`. */
type NamedTensor = Awaited<ReturnType<tf.Optimizer["getWeights"]>>[number];

/** The prefix of every optimizer variable. */
export const OPTIMIZER_PREFIX = "optimizer/";
const ITERATIONS = "optimizer/iterations";

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The optimizer state of one session. Call {@link OptimizerState.refresh} before use. */
export class OptimizerState {
  /** Fields of the optimizer holding tf variables that `getWeights()` does not report, sorted. */
  readonly hiddenFields: readonly string[];
  private slots: readonly Slot[] = [];
  /**
   * `true` once `slots` reflects the optimizer: slot variables are created by the first
   * optimizer step and keep their identity afterwards (they are updated with `assign`), so
   * they are listed after that step and after each restore, not on every step.
   */
  private slotsKnown = false;

  constructor(
    readonly optimizer: tf.Optimizer,
    private readonly weights: readonly ModelWeight[],
  ) {
    this.hiddenFields = Object.entries(optimizer)
      .filter(([, v]) => v instanceof tf.Variable)
      .map(([k]) => k)
      .sort();
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** The variable names: iterations, the hidden fields, then the slots known so far. */
  names(): string[] {
    return [ITERATIONS, ...this.hiddenFields.map((f) => `${OPTIMIZER_PREFIX}${f}`), ...this.slots.map((s) => s.name)];
  }

  /** The current value of the optimizer variable `name`, or `undefined` if there is none. */
  read(name: string): TensorValue | undefined {
    if (name === ITERATIONS) return int64(this.optimizer.iterations);
    const field = name.slice(OPTIMIZER_PREFIX.length);
    if (this.hiddenFields.includes(field)) return fromTf(this.hidden(field), name);
    const slot = this.slots.find((s) => s.name === name);
    return slot === undefined ? undefined : fromTf(slot.tensor, name);
  }

  /** Adds every optimizer variable's value, deep-copied, to `out`. */
  readAll(out: Map<string, TensorValue>): void {
    out.set(ITERATIONS, int64(this.optimizer.iterations));
    for (const f of this.hiddenFields) out.set(`${OPTIMIZER_PREFIX}${f}`, fromTf(this.hidden(f), `${OPTIMIZER_PREFIX}${f}`));
    for (const s of this.slots) out.set(s.name, fromTf(s.tensor, s.name));
  }

  /** `true` while {@link afterStep} has work to do (until the first step's slots are listed). */
  get refreshPending(): boolean {
    return !this.slotsKnown;
  }

  /** After an optimizer step: lists the slots the first step created (later steps reuse them). */
  async afterStep(): Promise<void> {
    if (!this.slotsKnown) await this.refresh();
  }

  /** Re-reads the optimizer's slot variables (they are created lazily and replaced by `setWeights`). */
  async refresh(): Promise<void> {
    let named: NamedTensor[];
    try {
      named = await this.optimizer.getWeights();
    } catch (e) {
      throw new ValueError(
        `the optimizer ${this.optimizer.getClassName()} cannot report its state (getWeights: ${(e as Error).message}), so it cannot be checkpointed`,
        { cause: e },
      );
    }
    const [iter, ...rest] = named;
    if (iter?.name !== "iter") throw new ValueError(`optimizer.getWeights() must start with "iter", got "${String(iter?.name)}"`);
    // Slots exist once the optimizer has taken a step (or had its weights set).
    const stepped = (iter.tensor.dataSync()[0] ?? 0) > 0;
    iter.tensor.dispose();
    const byTfName = new Map(this.weights.map((w) => [tfName(w), w.key]));
    this.slots = rest.map((s, k) => ({ name: slotName(k, s.name, byTfName), tensor: s.tensor }));
    this.slotsKnown = stepped || this.slots.length > 0;
  }

  /**
   * Validates a checkpoint's optimizer entries (every name starting `optimizer/`) without
   * changing anything. Throws `InvalidArgumentError` for a missing, unknown or mismatched entry.
   * With `derivedHidden`, an Adam optimizer's missing beta powers are not an error:
   * `setWeights` derives them from the iterations (a checkpoint Keras wrote has none).
   */
  plan(entries: ReadonlyMap<string, TensorValue>, { derivedHidden = false }: { readonly derivedHidden?: boolean } = {}): OptimizerPlan {
    const iterations = entries.get(ITERATIONS);
    if (iterations === undefined) {
      throw new InvalidArgumentError(`The optimizer is restored as a whole; the checkpoint lacks "${ITERATIONS}".`);
    }
    const iter = int64Value(iterations, ITERATIONS);
    if (iter > 2 ** 31 - 1) throw new InvalidArgumentError(`"${ITERATIONS}" = ${iter} exceeds tfjs's int32 counter`);
    const hidden: [string, TensorValue][] = [];
    for (const f of this.hiddenFields) {
      const name = `${OPTIMIZER_PREFIX}${f}`;
      const t = entries.get(name);
      if (t === undefined && derivedHidden && this.optimizer.getClassName() === "Adam") continue;
      if (t === undefined) throw new InvalidArgumentError(`The optimizer is restored as a whole; the checkpoint lacks "${name}".`);
      const v = this.hidden(f);
      expectLike(t, v.dtype as DType, v.shape, name);
      hidden.push([f, t]);
    }
    const slots: (readonly [string, TensorValue])[] = [];
    const keys = new Map(this.weights.map((w) => [w.key, w]));
    for (const [name, t] of entries) {
      if (name === ITERATIONS || this.hiddenFields.includes(name.slice(OPTIMIZER_PREFIX.length))) continue;
      const m = /^optimizer\/slot_(\d+)(?:\/(.+))?$/.exec(name);
      if (m === null) throw new InvalidArgumentError(`Checkpoint has variable "${name}" that the session does not.`);
      const k = Number(m[1]);
      const rest = m[2];
      // Slots of a model weight: `<weight key>/<slot>`. The tfjs name carries this process's variable name.
      const key = rest === undefined ? undefined : [...keys.keys()].filter((kk) => rest.startsWith(`${kk}/`)).sort((a, b) => b.length - a.length)[0];
      let slotTfName = `slot_${k}`;
      if (key !== undefined && rest !== undefined) {
        const w = keys.get(key) as ModelWeight;
        if (t.dtype !== "float32" || !sameShape(t.shape, weightShape(w))) {
          throw new InvalidArgumentError(
            `Optimizer slot "${name}" is ${t.dtype}[${t.shape.join(", ")}] but its weight is ${w.variable.dtype}[${weightShape(w).join(", ")}].`,
          );
        }
        slotTfName = `${tfName(w)}/${rest.slice(key.length + 1)}`;
      }
      slots[k] = [slotTfName, t];
    }
    for (let k = 0; k < slots.length; k++) {
      if (slots[k] === undefined) throw new InvalidArgumentError(`The checkpoint's optimizer slots skip slot_${k}.`);
    }
    if (this.slots.length > 0 && slots.length > 0 && slots.length !== this.slots.length) {
      throw new InvalidArgumentError(
        `The checkpoint holds ${slots.length} optimizer slots but this ${this.optimizer.getClassName()} optimizer has ${this.slots.length}.`,
      );
    }
    return { iter, hidden, slots };
  }

  /** Applies a plan made by {@link OptimizerState.plan}. */
  async apply(plan: OptimizerPlan): Promise<void> {
    const old = this.slots.map((s) => s.tensor);
    const named: NamedTensor[] = [
      { name: "iter", tensor: tf.scalar(plan.iter, "int32") },
      ...plan.slots.map(([name, t]) => ({ name, tensor: toTf(t) })),
    ];
    try {
      await this.optimizer.setWeights(named);
    } finally {
      // setWeights makes variables that share our tensors' data; ours can go.
      tf.dispose(named.map((n) => n.tensor));
    }
    // setWeights replaced the slot variables; the old ones are unreachable unless they are the same.
    await this.refresh();
    const kept = new Set(this.slots.map((s) => s.tensor));
    tf.dispose(old.filter((t) => !kept.has(t)));
    // After setWeights, because Adam's setWeights recomputes its beta powers with `pow`.
    for (const [f, t] of plan.hidden) {
      const v = toTf(t);
      this.hidden(f).assign(v);
      v.dispose();
    }
  }

  private hidden(field: string): tf.Variable {
    return (this.optimizer as unknown as Record<string, tf.Variable>)[field] as tf.Variable;
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The optimizer a model was compiled with, if any (reading it throws on an uncompiled model). */
export const compiledOptimizer = (model: tf.LayersModel): tf.Optimizer | undefined => {
  try {
    return model.optimizer ?? undefined;
  } catch {
    return undefined;
  }
};
