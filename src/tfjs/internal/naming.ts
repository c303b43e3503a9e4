/**
 * Process-independent names for a TensorFlow.js model's weights and its optimizer's slots.
 * tfjs names variables with process-wide counters (`dense_Dense3/kernel`), so a checkpoint
 * keyed by them would not restore in another process. Here a weight is named by its layer's
 * position and class (`model/0_dense/kernel`), and a slot by its position and the weight it
 * belongs to (`optimizer/slot_1/0_dense/kernel/m`). See the naming rules in TfjsSession.ts.
 *
 * @module
 */

import * as tf from "@tensorflow/tfjs";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** A model weight with its process-independent name. */
export interface ModelWeight {
  /** `model/<key>`. */
  readonly name: string;
  /** The name without the `model/` prefix (used inside optimizer slot names). */
  readonly key: string;
  readonly variable: tf.LayerVariable;
  /** The position of its layer in `model.layers`. */
  readonly layerIndex: number;
  /** Its layer's class (`Dense`). */
  readonly layerClass: string;
  /** Its name in its layer (`kernel`; the part of {@link key} after the layer). */
  readonly local: string;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** The model's weights, named by layer position rather than by tfjs's global layer names. */
export const modelWeights = (model: tf.LayersModel): ModelWeight[] => {
  const out: ModelWeight[] = [];
  const seen = new Set<tf.LayerVariable>();
  model.layers.forEach((layer, i) => {
    const prefix = `${i}_${snakeCase(layer.getClassName())}`;
    const used = new Set<string>();
    layer.weights.forEach((v, j) => {
      if (seen.has(v)) return; // a weight shared with an earlier layer is saved once
      seen.add(v);
      const own = v.originalName.startsWith(`${layer.name}/`) ? v.originalName.slice(layer.name.length + 1) : undefined;
      let local = own ?? `${j}_${v.originalName.split("/").pop() as string}`;
      if (used.has(local)) local = `${j}_${local}`;
      used.add(local);
      const key = `${prefix}/${local}`;
      out.push({ name: `model/${key}`, key, variable: v, layerIndex: i, layerClass: layer.getClassName(), local });
    });
  });
  return out;
};

/**
 * A slot's stable name: its position `k` and, if its tfjs name belongs to a model weight (keys
 * of `byTfName`: tfjs name → weight key), that weight and the slot kind.
 */
export const slotName = (k: number, tfjsName: string, byTfName: ReadonlyMap<string, string>): string => {
  let best: string | undefined;
  for (const n of byTfName.keys()) if (tfjsName.startsWith(`${n}/`) && (best === undefined || n.length > best.length)) best = n;
  return best === undefined ? `optimizer/slot_${k}` : `optimizer/slot_${k}/${byTfName.get(best) as string}/${tfjsName.slice(best.length + 1)}`;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** The weight's tfjs variable name in this process (what optimizer slot names start with). */
export const tfName = (w: ModelWeight): string => (w.variable.read() as tf.Variable).name;

/** The weight's shape. */
export const weightShape = (w: ModelWeight): number[] => w.variable.shape as number[];

const snakeCase = (s: string): string => s.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();
