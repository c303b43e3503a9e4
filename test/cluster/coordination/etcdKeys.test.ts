/** The etcd backend's stored values, decoded at the boundary: no etcd needed. */
import type { IKeyValue } from "etcd3";
import { describe, expect, it } from "vitest";

import { finalReportGeneration, isGeneration, parseGeneration, storedError } from "../../../src/cluster/coordination/etcdKeys.js";
import { DataLossError, UnavailableError } from "../../../src/errors.js";

/** A key-value as etcd3 gives one (only the fields the decoders read). */
const kv = (key: string, value: string): IKeyValue => ({ key: Buffer.from(key), value: Buffer.from(value) }) as IKeyValue;

describe("etcd values", () => {
  it("the generation counter: a positive integer, or DataLossError naming the key and what to do", () => {
    expect(parseGeneration(kv("/c/generation", "7"))).toBe(7);
    for (const bad of ["0", "-2", "1.5", "x", "", "9007199254740993"]) {
      expect(() => parseGeneration(kv("/c/generation", bad)), bad).toThrow(DataLossError);
    }
    expect(() => parseGeneration(kv("/c/generation", "x".repeat(100)))).toThrow(
      new DataLossError(`etcd key /c/generation: expected a positive integer generation, got "${"x".repeat(80)}"; delete the key to start from 1`),
    );
  });

  it("isGeneration: the counter's text names that generation; no counter or a malformed one names none", () => {
    expect(isGeneration("3", 3)).toBe(true);
    expect(isGeneration("4", 3)).toBe(false);
    expect(isGeneration(null, 3)).toBe(false);
    expect(isGeneration("three", 3)).toBe(false);
  });

  it("a recorded error becomes its class again; a malformed record is itself a DataLossError naming each problem's path", () => {
    const e = storedError(kv("/c/g/2/error", JSON.stringify({ code: 14, message: "task worker:1 declared failed", generation: 2 })));
    expect(e).toBeInstanceOf(UnavailableError);
    expect(e.message).toBe("task worker:1 declared failed");
    expect(storedError(kv("/c/g/2/error", '{"code":"14"}'))).toEqual(
      new DataLossError('etcd key /c/g/2/error: code: expected an error code (a number), got "14"; message: expected a string, got nothing'),
    );
    expect(storedError(kv("/c/g/2/error", "{oops"))).toEqual(new DataLossError('etcd key /c/g/2/error: expected JSON, got "{oops"'));
  });

  it("the final report's generation, or none for a record that names none", () => {
    expect(finalReportGeneration(kv("/c/final", JSON.stringify({ code: 1, message: "preempted", generation: 4 })))).toBe(4);
    expect(finalReportGeneration(kv("/c/final", JSON.stringify({ code: 1, message: "preempted" })))).toBeUndefined();
    expect(finalReportGeneration(kv("/c/final", '{"generation":"4"}'))).toBeUndefined();
    expect(finalReportGeneration(kv("/c/final", "null"))).toBeUndefined();
    expect(finalReportGeneration(kv("/c/final", "{"))).toBeUndefined();
  });
});
