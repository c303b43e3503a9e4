/**
 * Telling a thenable from a plain value, so that code on the hot path can skip an `await` (a
 * microtask) when a hook, a store or a session answered synchronously.
 *
 * @module
 */

/** `true` for a thenable (a promise or anything with a `then` method). */
export const isPromiseLike = <T = unknown>(x: T | PromiseLike<T>): x is PromiseLike<T> =>
  typeof x === "object" && x !== null && typeof (x as { then?: unknown }).then === "function";

/** `answer()` as a promise: its value or promise as it is, a throw as a rejection. */
export const promiseOf = <T>(answer: () => T | Promise<T>): Promise<T> => {
  try {
    return Promise.resolve(answer());
  } catch (e) {
    return Promise.reject(e);
  }
};
