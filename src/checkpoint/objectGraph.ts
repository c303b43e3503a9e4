/**
 * TensorFlow 2's object graph in checkpoints: what lets `tf.train.Checkpoint(model=...)` restore
 * a checkpoint this library wrote, and this library restore one that `tf.train.Checkpoint`
 * wrote, by object path rather than by variable name.
 *
 * A variable store may give each variable its TensorFlow 2 object paths
 * (`VariableStore.objectPaths`, e.g. `model/_functional/_operations/1/_kernel` for a Keras 3
 * Sequential model's first kernel). Saving such a store:
 * - keys every variable `<its name>/.ATTRIBUTES/VARIABLE_VALUE` (TensorFlow finds a tensor
 *   through the graph, but takes the part of the key before `.ATTRIBUTES/` as the saved object's
 *   name, so the suffix is required);
 * - adds `_CHECKPOINTABLE_OBJECT_GRAPH`: from the root, one node per path component, and one node
 *   per variable with its `VARIABLE_VALUE` attribute; each of a variable's paths is an edge to
 *   that node, and a variable without paths sits at its own name (`global_step`).
 *
 * Restoring a checkpoint this library wrote strips the suffix again (the bundle is ours when it
 * has the `_MONITORED_SESSION/step` tensor). Restoring one that TensorFlow wrote with an object
 * graph into a store with object paths gives each variable the value at the first of its paths
 * that the graph holds ({@link restoreInto}); the store completes what the graph lacks
 * (`VariableRestoreOptions.fromObjectGraph`).
 *
 * @module
 */

import { InvalidArgumentError } from "../errors.js";
import type { ObjectPaths, VariableStore } from "../session/Session.js";
import type { TensorValue } from "../session/Tensor.js";
import { decodeObjectGraph, encodeObjectGraph, type GraphAt, type ObjectReference, type SerializedTensor, type TrackableObject } from "./tensorBundle/objectGraphProto.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** What ends every key of a variable saved with an object graph (TensorFlow 2's attribute key). */
export const VARIABLE_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE";

/** The attribute name of a variable's value. */
const VARIABLE_VALUE = "VARIABLE_VALUE";

/** A checkpoint's values with the object graph TensorFlow wrote beside them. */
export interface ObjectGraphContents {
  readonly values: ReadonlyMap<string, TensorValue>;
  readonly objectGraph?: ObjectGraph | undefined;
}

/** The keys and the serialized graph of a save with object paths. */
export interface PlannedObjectGraph {
  /** The bundle key of each variable, by its name. */
  readonly keys: ReadonlyMap<string, string>;
  /** The serialized `TrackableObjectGraph`. */
  readonly graph: Uint8Array;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A decoded object graph, walked by path. */
export class ObjectGraph {
  private readonly childIndex = new Map<number, ReadonlyMap<string, number>>();

  private constructor(readonly nodes: readonly TrackableObject[]) {}

  /** Decodes a serialized graph (`DataLossError` naming the file and offset if malformed). */
  static decode(bytes: Uint8Array, at: GraphAt): ObjectGraph {
    return new ObjectGraph(decodeObjectGraph(bytes, at));
  }

  /**
   * The bundle key of the variable value at `path` (local names joined by `/` from the root), or
   * `undefined` if the graph has no object there or the object saves no value.
   */
  keyAt(path: string): string | undefined {
    let node = 0;
    for (const part of path.split("/")) {
      const next = this.children(node).get(part);
      if (next === undefined) return undefined;
      node = next;
    }
    return this.nodes[node]?.attributes.find((a) => a.name === VARIABLE_VALUE)?.checkpointKey;
  }

  private children(node: number): ReadonlyMap<string, number> {
    let m = this.childIndex.get(node);
    if (m === undefined) {
      // The first edge of a name wins, as in TensorFlow (a name appears once per node).
      const built = new Map<string, number>();
      for (const c of this.nodes[node]?.children ?? []) if (!built.has(c.localName)) built.set(c.localName, c.nodeId);
      this.childIndex.set(node, built);
      m = built;
    }
    return m;
  }
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Plans the keys and the object graph for saving the variables `names` with `objectPaths`.
 * Throws `InvalidArgumentError` when two variables claim one path.
 */
export const planObjectGraph = (names: Iterable<string>, objectPaths: ObjectPaths): PlannedObjectGraph => {
  const children: Map<string, number>[] = [new Map()];
  const attributes: (SerializedTensor | undefined)[] = [undefined];
  const nodeOf = new Map<string, number>();
  const keys = new Map<string, string>();
  const owner = new Map<number, string>();
  const newNode = (): number => {
    children.push(new Map());
    attributes.push(undefined);
    return children.length - 1;
  };
  for (const name of names) {
    const key = `${name}${VARIABLE_VALUE_SUFFIX}`;
    keys.set(name, key);
    const given = objectPaths.get(name) ?? [];
    for (const path of given.length > 0 ? given : [name]) {
      if (path.length === 0) throw new InvalidArgumentError(`variable ${JSON.stringify(name)} has an empty object path`);
      const parts = path.split("/");
      let node = 0;
      parts.forEach((part, i) => {
        const kids = children[node] as Map<string, number>;
        let next = kids.get(part);
        if (i < parts.length - 1) {
          if (next === undefined) kids.set(part, (next = newNode()));
          node = next;
          return;
        }
        const mine = nodeOf.get(name);
        if (next === undefined) {
          next = mine ?? newNode();
          kids.set(part, next);
        } else if (next !== mine) {
          const other = owner.get(next);
          if (other !== undefined) throw new InvalidArgumentError(`variables ${JSON.stringify(other)} and ${JSON.stringify(name)} both claim the object path ${JSON.stringify(path)}: give each variable its own path`);
          if (mine !== undefined) throw new InvalidArgumentError(`variable ${JSON.stringify(name)}'s object path ${JSON.stringify(path)} is a parent of other paths and cannot also be its earlier path's object`);
        }
        nodeOf.set(name, next);
        owner.set(next, name);
        attributes[next] = { name: VARIABLE_VALUE, fullName: name, checkpointKey: key };
        node = next;
      });
    }
  }
  // Every node lies on a path to a variable: each has checkpoint values.
  const nodes: TrackableObject[] = children.map((kids, i) => ({
    children: [...kids].map(([localName, nodeId]): ObjectReference => ({ nodeId, localName })),
    attributes: attributes[i] === undefined ? [] : [attributes[i] as SerializedTensor],
    hasCheckpointValues: true,
  }));
  return { keys, graph: encodeObjectGraph(nodes) };
};

/** The values of a checkpoint this library wrote with an object graph, by variable name (the key suffix removed). */
export const withoutValueSuffix = (values: ReadonlyMap<string, TensorValue>): Map<string, TensorValue> => {
  const out = new Map<string, TensorValue>();
  for (const [key, v] of values) out.set(key.endsWith(VARIABLE_VALUE_SUFFIX) ? key.slice(0, -VARIABLE_VALUE_SUFFIX.length) : key, v);
  return out;
};

/**
 * Restores a checkpoint's values into `store`. When TensorFlow wrote the checkpoint with an
 * object graph and the store gives object paths, each variable takes the value at the first of
 * its paths that the graph holds, and the store is told the values came through the graph (it
 * completes what the graph lacks, or refuses); otherwise the values restore by name. Throws
 * `InvalidArgumentError` when the graph holds none of the store's paths.
 */
export const restoreInto = async (store: VariableStore, contents: ObjectGraphContents): Promise<void> => {
  const graph = contents.objectGraph;
  if (graph === undefined || store.objectPaths === undefined) return store.restore(contents.values);
  const paths = store.objectPaths();
  const mapped = new Map<string, TensorValue>();
  for (const [name, candidates] of paths) {
    for (const path of candidates) {
      const key = graph.keyAt(path);
      const value = key === undefined ? undefined : contents.values.get(key);
      if (value !== undefined) {
        mapped.set(name, value);
        break;
      }
    }
  }
  if (mapped.size === 0) {
    const example = [...paths.values()].find((p) => p.length > 0)?.[0];
    throw new InvalidArgumentError(
      `the checkpoint's object graph (written by TensorFlow) holds none of this session's object paths${example === undefined ? "" : ` (such as ${JSON.stringify(example)})`}: it is another model's checkpoint; list its keys with tf.train.list_variables`,
    );
  }
  return store.restore(mapped, { fromObjectGraph: true });
};
