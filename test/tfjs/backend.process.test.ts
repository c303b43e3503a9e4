/**
 * Exit codes of a user's program on each backend (real child processes): once `useBackend`
 * returned, an uncaught error or an unhandled rejection ends the program as Node's default
 * does, exit 1 and the error's stack, also on `wasm`, whose Emscripten glue adds process
 * listeners that would make it exit 7 with ~38 KB of minified source. A listener the program
 * installed before stays.
 */
import { describe, expect, it } from "vitest";

import { spawnResult, type Result } from "../util/cli.js";

const FIXTURE = "test/fixtures/tfjs/uncaught.ts";

/** Runs the fixture as a program of the package's own project (the package by its name, from src/). */
const program = (backend: string, mode: string): Promise<Result> =>
  spawnResult(process.execPath, ["--conditions=monitored-session-source", "--import", "tsx", FIXTURE, backend, mode], { timeoutMs: 60_000 });

/** Node's default report of an uncaught error: its source line and stack, nothing of the glue's. */
const expectNodeDefault = (r: Result): void => {
  expect(r.code, r.stderr).toBe(1);
  expect(r.stderr).toContain("Error: boom\n");
  expect(r.stderr).toMatch(/^\s+at .*uncaught\.ts/m);
  expect(Buffer.byteLength(r.stderr)).toBeLessThan(5000);
  expect(r.stderr).not.toContain("WasmBackendModule");
};

describe("useBackend: a program's exit on an uncaught error", () => {
  it.each(["wasm", "cpu"])("%s: an uncaught throw exits 1 with the error's stack, in a few lines", async (backend) => {
    expectNodeDefault(await program(backend, "throw"));
  });

  it("wasm: an unhandled rejection exits 1 with the error's stack", async () => {
    expectNodeDefault(await program("wasm", "reject"));
  });

  it("wasm: the program's own uncaughtException listener, installed before, stays and decides", async () => {
    const r = await program("wasm", "own-listener");
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toBe("own listener: boom\n");
  });
});
