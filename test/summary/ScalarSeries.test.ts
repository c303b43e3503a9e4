import { describe, expect, it } from "vitest";
import { LogdirScalars } from "../../src/summary/LogdirScalars.js";
import { ScalarSeries } from "../../src/summary/ScalarSeries.js";

describe("ScalarSeries", () => {
  it("keeps every point in int32 / float64 / float32 columns: 16 bytes a point, growing by doubling", () => {
    const s = new ScalarSeries(4);
    for (let i = 0; i < 1000; i++) s.append(i, 1_700_000_000 + i / 8, Math.fround(i / 3));
    expect(s.length).toBe(1000);
    expect(s.steps).toBeInstanceOf(Int32Array);
    expect(s.values).toBeInstanceOf(Float32Array);
    expect(s.bytesPerPoint).toBe(16);
    expect(s.byteLength).toBe(1024 * 16);
    expect(s.wallTimes[999]).toBe(1_700_000_000 + 999 / 8); // not rounded to float32
    expect(s.values[999]).toBe(Math.fround(999 / 3));
    s.trim();
    expect(s.byteLength).toBe(1000 * 16);
    expect(s.steps[999]).toBe(999);
  });

  it("switches steps to float64 beyond int32 and values to float64 when float32 cannot hold them, losing nothing", () => {
    const s = new ScalarSeries(2);
    s.append(1, 1, 0.5);
    s.append(2, 1, Number.NaN); // NaN fits float32
    expect(s.bytesPerPoint).toBe(16);
    s.append(2 ** 40, 1, 0.1);
    expect(s.steps).toBeInstanceOf(Float64Array);
    expect(s.values).toBeInstanceOf(Float64Array);
    expect(s.bytesPerPoint).toBe(24);
    expect([...s.steps]).toEqual([1, 2, 2 ** 40]);
    expect([...s.values]).toEqual([0.5, Number.NaN, 0.1]);
  });

  it("purgeFrom(step) removes the points with step >= step and keeps the others in order", () => {
    const s = new ScalarSeries();
    for (const step of [1, 5, 2, 6, 3]) s.append(step, step, step * 10);
    expect(s.purgeFrom(3)).toBe(3);
    expect([...s.steps]).toEqual([1, 2]);
    expect([...s.values]).toEqual([10, 20]);
    expect([...s.wallTimes]).toEqual([1, 2]);
  });
});

describe("LogdirScalars", () => {
  const scalar = (run: string, tag: string, step: number, value = step) => ({ kind: "scalar", run, wallTime: step, step, tag, value }) as const;

  it("without a file version: a step below the last one purges steps >= it, only in that tag (TensorBoard's out-of-order rule)", () => {
    const store = new LogdirScalars();
    for (const e of [scalar("r", "a", 1), scalar("r", "b", 1), scalar("r", "a", 2), scalar("r", "b", 2), scalar("r", "a", 3), scalar("r", "a", 2, 20)]) store.ingest(e);
    expect([...(store.series("r", "a")?.steps ?? [])]).toEqual([1, 2]);
    expect([...(store.series("r", "a")?.values ?? [])]).toEqual([1, 20]);
    expect([...(store.series("r", "b")?.steps ?? [])]).toEqual([1, 2]);
  });

  it("with brain.Event:2: out-of-order steps are kept; only a second START purges", () => {
    const store = new LogdirScalars();
    const header = { run: "r", wallTime: 0, step: 0 };
    store.ingest({ kind: "fileVersion", ...header, version: "brain.Event:2" });
    store.ingest({ kind: "sessionLog", ...header, step: 5, status: "START", msg: "", checkpointPath: "" });
    for (const e of [scalar("r", "a", 5), scalar("r", "a", 6), scalar("r", "a", 2)]) store.ingest(e);
    expect([...(store.series("r", "a")?.steps ?? [])]).toEqual([5, 6, 2]);
    store.ingest({ kind: "sessionLog", ...header, step: 6, status: "START", msg: "", checkpointPath: "" });
    expect([...(store.series("r", "a")?.steps ?? [])]).toEqual([5, 2]);
    expect(store.runs()).toEqual(["r"]);
    expect(store.byteLength).toBe(64 * 16);
  });
});
