/**
 * A standby's wait (src/cli/standby.ts), in this process: it loads while it waits, takes one go
 * line from launch, and refuses anything else in one line, with nothing applied.
 */
import { PassThrough } from "node:stream";

import { describe, expect, it } from "vitest";

import { STANDBY_ENV, standBy, standbyGoLine } from "../../src/cli/standby.js";

const NOW = 1_796_000_000_000;

/** A standby on a stdin that gets `input` (then ends, if `end`), with its environment. */
const waitFor = async (input: string, end = true): Promise<{ outcome: Awaited<ReturnType<typeof standBy>>; env: NodeJS.ProcessEnv; preloaded: boolean }> => {
  const stdin = new PassThrough();
  const env: NodeJS.ProcessEnv = { [STANDBY_ENV]: "1", KEPT: "yes", TF_CONFIG: "stale" };
  let preloaded = false;
  const waiting = standBy(stdin, env, async () => {
    preloaded = true;
  }, () => NOW);
  stdin.write(input);
  if (end) stdin.end();
  return { outcome: await waiting, env, preloaded };
};

describe("a standby's go", () => {
  it("sets the group's variables, drops its own, and counts its start from the go", async () => {
    const { outcome, env, preloaded } = await waitFor(standbyGoLine({ TF_CONFIG: '{"cluster":{}}', MONITORED_SESSION_CHAOS_OP_ERRORS: "[]" }), false);
    expect(outcome).toEqual({ go: true, startMs: NOW });
    expect(env).toEqual({ KEPT: "yes", TF_CONFIG: '{"cluster":{}}', MONITORED_SESSION_CHAOS_OP_ERRORS: "[]" });
    expect(preloaded).toBe(true);
  });

  it("a go written in pieces is one line", async () => {
    const stdin = new PassThrough();
    const env: NodeJS.ProcessEnv = {};
    const waiting = standBy(stdin, env, async () => undefined, () => NOW);
    const line = standbyGoLine({ TF_CONFIG: "x" });
    for (const ch of line) stdin.write(ch);
    expect((await waiting).go).toBe(true);
    expect(env["TF_CONFIG"]).toBe("x");
  });

  it("stdin closed without a line (launch is done, or died): exit 0 without a word", async () => {
    const { outcome, env } = await waitFor("");
    expect(outcome).toEqual({ go: false, code: 0 });
    expect(env[STANDBY_ENV]).toBe("1");
    expect((await waitFor('{"env":{}}')).outcome).toEqual({ go: false, code: 0 });
  });

  it("the go does not wait for the modules still loading (the start is stamped, and the task's handlers installed, at once)", async () => {
    const stdin = new PassThrough();
    const waiting = standBy(stdin, {}, () => new Promise<never>(() => undefined), () => NOW);
    stdin.end(standbyGoLine({ TF_CONFIG: "x" }));
    expect(await waiting).toEqual({ go: true, startMs: NOW });
  });

  it("a module that fails to load is left for the start to report", async () => {
    const stdin = new PassThrough();
    const waiting = standBy(stdin, {}, () => Promise.reject(new Error("no tfjs")), () => NOW);
    stdin.end(standbyGoLine({}));
    expect((await waiting).go).toBe(true);
  });

  it.each([
    ["not JSON", "hello\n", /^monitored-session: standby \(launch\): the go line is not JSON \(/],
    ["no env", "{}\n", /the go line is not a standby's go \(\{"env": \{name: value\}\}\): env: /],
    ["a value that is not a string", '{"env":{"TF_CONFIG":1}}\n', /the go line is not a standby's go .*: env\.TF_CONFIG: /],
    ["its own variable", `{"env":{"${STANDBY_ENV}":"1"}}\n`, /the go line may not set "MONITORED_SESSION_STANDBY"/],
    ["a name that is not a variable's", '{"env":{"A=B":"1"}}\n', /the go line may not set "A=B"/],
    ["a prototype key", '{"env":{"__proto__":"1"}}\n', /the go line may not set "__proto__"/],
    ["an array", "[]\n", /the go line is not a standby's go/],
  ])("%s: exit 2 with one line naming the problem, nothing applied", async (_what, input, message) => {
    const { outcome, env } = await waitFor(input);
    expect(outcome.go).toBe(false);
    if (outcome.go) return;
    expect(outcome.code).toBe(2);
    expect(outcome.line).toMatch(message);
    expect(outcome.line).toContain("this process only takes a go from launch");
    expect(outcome.line?.includes("\n")).toBe(false);
    expect(env).toEqual({ [STANDBY_ENV]: "1", KEPT: "yes", TF_CONFIG: "stale" });
  });

  it("more than 1 MiB without a newline: exit 2, the line says how long", async () => {
    const { outcome } = await waitFor("x".repeat((1 << 20) + 10), false);
    expect(outcome).toEqual({ go: false, code: 2, line: expect.stringContaining(`the go line is longer than ${1 << 20} bytes`) as unknown });
  });
});
