/** The error every hostile bundle must give: a one-line DataLossError naming the file and the byte offset. */
import { expect } from "vitest";

import { DataLossError } from "../../../src/errors.js";

/** What a DataLossError of `file` says: the byte offset, and the whole message. */
export interface DataLossAt {
  readonly offset: number;
  readonly message: string;
}

const check = (error: unknown, file: string): DataLossAt => {
  expect(error, "expected a DataLossError").toBeInstanceOf(DataLossError);
  const message = (error as Error).message;
  expect(message).not.toContain("\n");
  expect(message.startsWith(`${file}: at byte `), message).toBe(true);
  return { offset: Number(/: at byte (\d+): /.exec(message)?.[1]), message };
};

/** What `f` threw, checked to be a one-line DataLossError that starts `<file>: at byte <n>: `. */
export const dataLossOf = (file: string, f: () => unknown): DataLossAt => {
  let error: unknown;
  try {
    f();
  } catch (e) {
    error = e;
  }
  return check(error, file);
};

/** What the promise of `f` rejected with, checked as {@link dataLossOf} checks it. */
export const dataLossIn = async (file: string, f: () => Promise<unknown>): Promise<DataLossAt> =>
  check(await f().then(() => undefined, (e: unknown) => e), file);
