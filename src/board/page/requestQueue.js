// The page's requests for chart data go through one queue: at most `concurrency` at a time, so a
// page of thousands of tags never fires thousands of requests at once (Chromium gives up with
// ERR_INSUFFICIENT_RESOURCES). A chart asks when it comes into view and withdraws when it leaves
// before its turn; a chart asked again while its request runs is fetched once more after it.

/**
 * A queue of tasks keyed by what they fetch (a chart): `add(key, task)` runs `task()` when a slot
 * is free, in the order asked; `cancel(key)` withdraws it if it has not started. A key is never
 * run twice at once: asked while running, it runs again once, after. A task's rejection goes to
 * `onError` and frees its slot. `stats` counts what the tests and the benchmark read.
 */
export const createRequestQueue = ({ concurrency, onError = () => {} }) => {
  /** Keys waiting, in the order asked (a Map keeps insertion order), with their tasks. */
  const waiting = new Map();
  /** Keys running; true when asked again meanwhile (the task to run after). */
  const running = new Map();
  const stats = { running: 0, waiting: 0, maxRunning: 0, started: 0, cancelled: 0 };
  const count = () => {
    stats.running = running.size;
    stats.waiting = waiting.size;
    stats.maxRunning = Math.max(stats.maxRunning, running.size);
  };
  const pump = () => {
    for (const [key, task] of waiting) {
      if (running.size >= concurrency) break;
      waiting.delete(key);
      running.set(key, undefined);
      stats.started++;
      count();
      Promise.resolve()
        .then(task)
        .catch(onError)
        .finally(() => {
          const again = running.get(key);
          running.delete(key);
          if (again !== undefined && !waiting.has(key)) waiting.set(key, again);
          count();
          pump();
        });
    }
    count();
  };
  return {
    stats,
    add(key, task) {
      if (running.has(key)) running.set(key, task);
      else if (!waiting.has(key)) waiting.set(key, task);
      pump();
    },
    cancel(key) {
      if (waiting.delete(key)) stats.cancelled++;
      if (running.get(key) !== undefined) running.set(key, undefined);
      count();
    },
    /** Whether `key` waits or runs. */
    has: (key) => waiting.has(key) || running.has(key),
  };
};
