/**
 * What a replica decodes from its peers: the model signatures at the join and rank 0's state
 * layout. A scripted collective (rank 1 of 2) plays rank 0's side, so a malformed message can be
 * sent; three real replicas train in TfjsSession.replicas.test.ts.
 */
import { describe, expect, it } from "vitest";

import type { Collective, CollectiveBuffer } from "../../../src/session/Collective.js";
import { DataLossError, ModelMismatchError } from "../../../src/errors.js";
import type { TensorValue } from "../../../src/session/Tensor.js";
import { Replicas } from "../../../src/tfjs/internal/Replicas.js";

const utf8 = (s: string): number[] => [...Buffer.from(s, "utf8")];

/**
 * Rank 1 of 2, with rank 0 scripted: `signature` is rank 0's model signature (its hash is made
 * to differ from rank 1's unless it is `undefined`), `layout` the JSON of its state layout.
 */
const scripted = (rank0: { signature?: string; layout?: string }): Collective => {
  let reduces = 0;
  let broadcasts = 0;
  return {
    rank: 1,
    size: 2,
    tasks: ["/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"],
    allReduce: async <B extends CollectiveBuffer>(buffer: B): Promise<B> => {
      reduces++;
      if (reduces === 1) {
        // Heads: [hash, parameters, length] per rank. The same as rank 1's, or another hash.
        buffer.set(buffer.subarray(3, 6), 0);
        if (rank0.signature !== undefined) buffer.set([(buffer[3] as number) + 1, buffer[4] as number, Buffer.byteLength(rank0.signature)], 0);
      } else if (rank0.signature !== undefined) {
        buffer.set(utf8(rank0.signature), 0);
      }
      return buffer;
    },
    broadcast: async <B extends CollectiveBuffer>(buffer: B): Promise<B> => {
      broadcasts++;
      const layout = rank0.layout ?? "[]";
      if (broadcasts === 1) buffer.set([Buffer.byteLength(layout)]);
      else if (broadcasts === 2) buffer.set(utf8(layout));
      return buffer;
    },
    barrier: async () => {},
    onPeerFailed: () => {},
    close: async () => {},
  };
};

const host = { globalStep: 0, snapshot: () => new Map<string, TensorValue>(), restore: async () => {} };

describe("Replicas: what a replica decodes from its peers", () => {
  it("a state layout that is not one rejects with DataLossError naming each problem's path", async () => {
    const replicas = new Replicas(scripted({ layout: '[["global_step","int64",[]],["w","float16",[2,-1]]]' }), [], []);
    await expect(replicas.prepare(host)).rejects.toThrow(
      new DataLossError(
        'the state layout broadcast by rank 0 (/job:worker/replica:0/task:0): [1][1]: expected a dtype, got "float16"; [1][2][1]: expected an integer >= 0, got -1',
      ),
    );
    await expect(new Replicas(scripted({ layout: "[[" }), [], []).prepare(host)).rejects.toThrow(/state layout broadcast by rank 0 .*: expected JSON, got "\[\["/);
  });

  it("an empty layout from rank 0 is taken as it is", async () => {
    await expect(new Replicas(scripted({}), [], []).prepare(host)).resolves.toBeUndefined();
  });

  it("another model names its first difference; an unreadable signature is DataLossError naming the line", async () => {
    await expect(new Replicas(scripted({ signature: "model/w\tfloat32[3]\ntrainable parameters\t0" }), [], []).prepare(host)).rejects.toThrow(
      new ModelMismatchError(
        "The replicas' models differ: rank 1 (/job:worker/replica:0/task:1) has no model/w where rank 0 (/job:worker/replica:0/task:0) has model/w float32[3]. Every worker must build the same model (same layers, shapes and dtypes).",
      ),
    );
    await expect(new Replicas(scripted({ signature: "model/w float32[3]\ntrainable parameters\t0" }), [], []).prepare(host)).rejects.toThrow(
      new DataLossError('the model signature of rank 0 (/job:worker/replica:0/task:0): [0]: expected "<name>\\t<dtype>[<shape>]", got "model/w float32[3]"'),
    );
  });
});
