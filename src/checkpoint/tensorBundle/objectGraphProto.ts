/**
 * TensorFlow 2's `TrackableObjectGraph`, the message a `tf.train.Checkpoint` stores as the
 * string scalar `_CHECKPOINTABLE_OBJECT_GRAPH`, encoded and decoded field by field on
 * `@bufbuild/protobuf`'s wire writer and reader, as `bundleProtos.ts` does for the index's
 * messages. Only what a restore by object path needs is modelled:
 *
 * | message | field | number |
 * |---|---|---|
 * | `TrackableObjectGraph` | `nodes` (repeated `TrackableObject`; node 0 is the root) | 1 |
 * | `TrackableObject` | `children` (repeated `ObjectReference`) | 1 |
 * | | `attributes` (repeated `SerializedTensor`) | 2 |
 * | | `has_checkpoint_values` (`google.protobuf.BoolValue`, its `value` = 1) | 5 |
 * | `ObjectReference` | `node_id` (int32), `local_name` (string) | 1, 2 |
 * | `SerializedTensor` | `name`, `full_name`, `checkpoint_key` (strings) | 1, 2, 3 |
 *
 * The numbers were read off graphs TensorFlow 2.21 wrote (the committed Keras fixtures, decoded
 * raw). Other fields (slot variables, registered savers) are skipped when reading and never
 * written: this library's variables are plain values, with no slot relations to declare.
 *
 * Decoding trusts nothing: a truncated or malformed message, a wrong wire type, a child that
 * names a node the graph does not have, text that is not UTF-8, or more than
 * {@link MAX_GRAPH_ITEMS} nodes, children and attributes together (each costs a few bytes of
 * input and far more memory decoded) is a one-line `DataLossError` naming the file and byte
 * offset.
 *
 * @module
 */

import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

import { int32, message, nested, walk, type MessageAt } from "./bundleProtos.js";
import { dataLossAt } from "./sstable.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** An edge of the graph: the child's node id and its name under its parent. */
export interface ObjectReference {
  readonly nodeId: number;
  readonly localName: string;
}

/** A tensor an object saves: `name` is the attribute (`VARIABLE_VALUE`), `checkpointKey` the bundle's key. */
export interface SerializedTensor {
  readonly name: string;
  readonly fullName: string;
  readonly checkpointKey: string;
}

/** One object of the graph. */
export interface TrackableObject {
  readonly children: readonly ObjectReference[];
  readonly attributes: readonly SerializedTensor[];
  /** Whether the object or a descendant saves a tensor (`undefined`: not stated). */
  readonly hasCheckpointValues?: boolean | undefined;
}

/**
 * The most nodes, children and attributes (together) a decoded graph may have: a Keras model
 * of thousands of layers has tens of thousands; a crafted graph of millions would take gigabytes.
 */
export const MAX_GRAPH_ITEMS = 2 ** 21;

/** Where the graph lies, for error messages. */
export interface GraphAt {
  /** The data file that holds the string tensor. */
  readonly file: string;
  /** The byte offset of the serialized graph in `file`. */
  readonly offset: number;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Serializes a graph (fields in number order, defaults left out, as proto3's C++ serializer writes). */
export const encodeObjectGraph = (nodes: readonly TrackableObject[]): Uint8Array => {
  const w = new BinaryWriter();
  for (const node of nodes) {
    w.tag(1, WireType.LengthDelimited).fork();
    for (const c of node.children) {
      w.tag(1, WireType.LengthDelimited).fork();
      if (c.nodeId !== 0) w.tag(1, WireType.Varint).int32(c.nodeId);
      if (c.localName !== "") w.tag(2, WireType.LengthDelimited).string(c.localName);
      w.join();
    }
    for (const a of node.attributes) {
      w.tag(2, WireType.LengthDelimited).fork();
      if (a.name !== "") w.tag(1, WireType.LengthDelimited).string(a.name);
      if (a.fullName !== "") w.tag(2, WireType.LengthDelimited).string(a.fullName);
      if (a.checkpointKey !== "") w.tag(3, WireType.LengthDelimited).string(a.checkpointKey);
      w.join();
    }
    if (node.hasCheckpointValues !== undefined) {
      w.tag(5, WireType.LengthDelimited).fork();
      if (node.hasCheckpointValues) w.tag(1, WireType.Varint).bool(true);
      w.join();
    }
    w.join();
  }
  return w.finish();
};

/**
 * Decodes a serialized graph. Every child's node id is checked against the node count, so a
 * walk of the result never indexes past it.
 */
export const decodeObjectGraph = (bytes: Uint8Array, at: GraphAt): TrackableObject[] => {
  const nodes: TrackableObject[] = [];
  const edges: { readonly id: number; readonly offset: number }[] = [];
  const graph: MessageAt = { file: at.file, offset: at.offset, what: "object graph" };
  const budget = { items: 0 };
  walk(bytes, graph, (field, wire, r) => {
    if (field !== 1) return false;
    const m = message(r, wire, "nodes");
    nodes.push(decodeNode(m, nested(graph, r, m, `node ${nodes.length}`), edges, budget));
    return true;
  });
  for (const e of edges) {
    if (e.id < 0 || e.id >= nodes.length) throw dataLossAt(at.file, e.offset, `object graph: a child names node ${e.id}, but the graph has ${nodes.length} nodes`);
  }
  if (nodes.length === 0) throw dataLossAt(at.file, at.offset, "object graph: no nodes (node 0 is the root)");
  return nodes;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const UTF8 = new TextDecoder("utf-8", { fatal: true });

const text = (r: BinaryReader, wire: WireType, name: string): string => {
  const b = message(r, wire, name);
  try {
    return UTF8.decode(b);
  } catch {
    throw new Error(`${name} is not UTF-8 text`);
  }
};

const decodeNode = (bytes: Uint8Array, at: MessageAt, edges: { id: number; offset: number }[], budget: { items: number }): TrackableObject => {
  const children: ObjectReference[] = [];
  const attributes: SerializedTensor[] = [];
  let hasCheckpointValues: boolean | undefined;
  const count = (): void => {
    if (++budget.items > MAX_GRAPH_ITEMS) throw new Error(`more than ${MAX_GRAPH_ITEMS} nodes, children and attributes`);
  };
  count();
  walk(bytes, at, (field, wire, r) => {
    if (field === 1 || field === 2) count();
    switch (field) {
      case 1: {
        const m = message(r, wire, "children");
        const child = nested(at, r, m, "child");
        let nodeId = 0;
        let localName = "";
        walk(m, child, (f, w, cr) => {
          if (f === 1) nodeId = int32(cr, w, "node_id");
          else if (f === 2) localName = text(cr, w, "local_name");
          else return false;
          return true;
        });
        edges.push({ id: nodeId, offset: child.offset });
        children.push({ nodeId, localName });
        return true;
      }
      case 2: {
        const m = message(r, wire, "attributes");
        const fields = ["", "", ""];
        walk(m, nested(at, r, m, "attribute"), (f, w, ar) => {
          if (f < 1 || f > 3) return false;
          fields[f - 1] = text(ar, w, ["name", "full_name", "checkpoint_key"][f - 1] as string);
          return true;
        });
        attributes.push({ name: fields[0] as string, fullName: fields[1] as string, checkpointKey: fields[2] as string });
        return true;
      }
      case 5: {
        const m = message(r, wire, "has_checkpoint_values");
        let value = false;
        walk(m, nested(at, r, m, "has_checkpoint_values"), (f, w, br) => {
          if (f !== 1) return false;
          value = int32(br, w, "has_checkpoint_values") !== 0;
          return true;
        });
        hasCheckpointValues = value;
        return true;
      }
      default:
        return false;
    }
  });
  return { children, attributes, hasCheckpointValues };
};
