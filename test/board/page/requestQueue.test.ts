import { describe, expect, it } from "vitest";

import { pageModule } from "./pageModule.js";

interface Stats {
  running: number;
  waiting: number;
  maxRunning: number;
  started: number;
  cancelled: number;
}
interface Queue {
  readonly stats: Stats;
  add(key: unknown, task: () => Promise<void>): void;
  cancel(key: unknown): void;
  has(key: unknown): boolean;
}
const { createRequestQueue } = await pageModule<{ createRequestQueue: (o: { concurrency: number; onError?: (e: unknown) => void }) => Queue }>("requestQueue.js");

/** Tasks that end when the test says: `task(key)` records its start and waits for `finish(key)`. */
const tasks = () => {
  const started: string[] = [];
  const pending = new Map<string, { resolve: () => void; reject: (e: Error) => void }[]>();
  return {
    started,
    task: (key: string) => () =>
      new Promise<void>((resolve, reject) => {
        started.push(key);
        pending.set(key, [...(pending.get(key) ?? []), { resolve, reject }]);
      }),
    finish: async (key: string, error?: Error) => {
      const [first, ...rest] = pending.get(key) ?? [];
      if (first === undefined) throw new Error(`${key} is not running`);
      pending.set(key, rest);
      if (error === undefined) first.resolve();
      else first.reject(error);
      await settle();
    },
    running: (key: string) => (pending.get(key) ?? []).length,
  };
};

/** Lets the queue's promise chains run (no time passes). */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe("the page's request queue (src/board/page/requestQueue.js)", () => {
  it("runs at most `concurrency` tasks at once, in the order asked; each end starts the next", async () => {
    const t = tasks();
    const q = createRequestQueue({ concurrency: 4 });
    for (let i = 0; i < 20; i++) q.add(`c${i}`, t.task(`c${i}`));
    await settle();
    expect(t.started).toEqual(["c0", "c1", "c2", "c3"]);
    expect(q.stats).toMatchObject({ running: 4, waiting: 16 });
    await t.finish("c1");
    expect(t.started).toEqual(["c0", "c1", "c2", "c3", "c4"]);
    for (let i = 0; i < 20; i++) {
      if (i === 1) continue;
      await t.finish(`c${i}`);
      expect(q.stats.running).toBeLessThanOrEqual(4);
    }
    expect(t.started).toHaveLength(20);
    expect(q.stats).toMatchObject({ running: 0, waiting: 0, maxRunning: 4, started: 20 });
  });

  it("a task withdrawn before its turn never runs; one asked twice while waiting runs once", async () => {
    const t = tasks();
    const q = createRequestQueue({ concurrency: 1 });
    q.add("a", t.task("a"));
    q.add("b", t.task("b"));
    q.add("c", t.task("c"));
    q.add("c", t.task("c"));
    q.cancel("b");
    expect(q.has("b")).toBe(false);
    await settle();
    await t.finish("a");
    await t.finish("c");
    expect(t.started).toEqual(["a", "c"]);
    expect(q.stats).toMatchObject({ started: 2, cancelled: 1, running: 0, waiting: 0 });
  });

  it("a key asked again while it runs runs once more after it, never beside it, however often asked", async () => {
    const t = tasks();
    const q = createRequestQueue({ concurrency: 4 });
    q.add("a", t.task("a"));
    await settle();
    q.add("a", t.task("a"));
    q.add("a", t.task("a"));
    await settle();
    expect(t.running("a")).toBe(1);
    await t.finish("a");
    expect(t.started).toEqual(["a", "a"]);
    await t.finish("a");
    expect(t.started).toEqual(["a", "a"]);
    expect(q.has("a")).toBe(false);
  });

  it("withdrawing a running key drops its run after, not the run under way", async () => {
    const t = tasks();
    const q = createRequestQueue({ concurrency: 4 });
    q.add("a", t.task("a"));
    await settle();
    q.add("a", t.task("a"));
    q.cancel("a");
    expect(q.has("a")).toBe(true);
    await t.finish("a");
    expect(t.started).toEqual(["a"]);
    expect(q.has("a")).toBe(false);
  });

  it("a task that fails goes to onError and frees its slot", async () => {
    const t = tasks();
    const errors: unknown[] = [];
    const q = createRequestQueue({ concurrency: 1, onError: (e) => errors.push(e) });
    q.add("a", t.task("a"));
    q.add("b", t.task("b"));
    await settle();
    await t.finish("a", new Error("gone"));
    expect(errors.map((e) => (e as Error).message)).toEqual(["gone"]);
    expect(t.started).toEqual(["a", "b"]);
  });
});
