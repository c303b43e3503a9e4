/** A preemption key-value store for the agreement's tests, on the virtual clock: its generation is the test's, and it fails pending gets on demand. */
import { AlreadyExistsError, DeadlineExceededError } from "../../src/errors.js";
import type { VirtualClock } from "../../src/testing/VirtualClock.js";

/** A store whose generation the test sets, and whose pending gets it fails (the chief lost). */
export const scriptedStore = (clock: VirtualClock) => {
  const values = new Map<string, string>();
  const waiters = new Map<string, { ok: (v: string) => void; fail: (e: unknown) => void }[]>();
  const store = {
    generation: 1 as number | undefined,
    inserted: [] as string[],
    insert: async (key: string, value: string): Promise<void> => {
      if (values.has(key)) throw new AlreadyExistsError(key);
      values.set(key, value);
      store.inserted.push(key);
      for (const w of waiters.get(key) ?? []) w.ok(value);
      waiters.delete(key);
    },
    get: (key: string, options?: { readonly timeoutMs?: number }): Promise<string> =>
      new Promise<string>((ok, fail) => {
        const v = values.get(key);
        if (v !== undefined) return ok(v);
        waiters.set(key, [...(waiters.get(key) ?? []), { ok, fail }]);
        clock.setTimer(options?.timeoutMs ?? 60_000, () => fail(new DeadlineExceededError(`no ${key}`)));
      }),
    reportErrorToCluster: async (): Promise<void> => undefined,
    /** Every pending get fails with `e`, as a client's calls do when the cluster fails. */
    failPending: (e: unknown): void => {
      for (const ws of waiters.values()) for (const w of ws) w.fail(e);
      waiters.clear();
    },
    pending: (): string[] => [...waiters.keys()],
  };
  return store;
};

