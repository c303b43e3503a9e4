/**
 * Reading the global step from a hook: finding its name on the session and turning a fetched
 * value into a number. Internal to the built-in hooks.
 *
 * @module
 */

import { RuntimeError } from "../../src/errors.js";
import type { Session } from "../../src/session/Session.js";

/**
 * The name of `session`'s global step variable. Throws TensorFlow's
 * `RuntimeError('Global step should be created to use <hook>.')` if it has none.
 */
export const globalStepNameOf = (session: Session, hookName: string): string => {
  const name = session.globalStepName;
  if (typeof name !== "string" || name.length === 0) {
    throw new RuntimeError(`Global step should be created to use ${hookName}.`);
  }
  return name;
};

/**
 * A fetched global step as a number. Sessions may return a JS number, a bigint (int64) or a
 * one-element tensor or typed array.
 */
export const stepValue = (value: unknown): number => {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  const data = ArrayBuffer.isView(value)
    ? (value as unknown as ArrayLike<unknown>)
    : typeof value === "object" && value !== null && "data" in value
      ? ((value as { data: ArrayLike<unknown> }).data)
      : undefined;
  if (data !== undefined && data.length === 1) return stepValue(data[0]);
  throw new RuntimeError(`the global step must be a scalar number, got ${describe(value)}`);
};

/** Runs the global step on the raw session and returns its true (post-run) value. */
export const readGlobalStep = (session: Session, name: string): Promise<number> =>
  session.run(name).then(stepValue);

const describe = (v: unknown): string =>
  v === null ? "null" : typeof v === "object" ? (v.constructor?.name ?? "object") : typeof v;
