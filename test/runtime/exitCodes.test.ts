import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { CHIEF_LOST_EXIT_CODE, PREEMPTION_EXIT_CODE } from "../../src/preemption/index.js";
import { ExitCodes, exitCodesHelp, exitCodesMarkdown, SignalExitCodes } from "../../src/runtime/exitCodes.js";

/** Where the table is printed for people: each holds exactly {@link exitCodesMarkdown}'s text. */
const DOCS = ["README.md", "docs/preemption.md", "docs/distributed.md", "docs/configuration.md", "docs/kubernetes.md"] as const;

const read = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");

/** The table's rows as `[code, meaning]`. */
const markdownRows = (): [number, string][] =>
  exitCodesMarkdown()
    .split("\n")
    .filter((l) => /^\| \d/.test(l))
    .map((l) => {
      const [, code, meaning] = /^\| (\d+) \| (.*) \|$/.exec(l) ?? [];
      return [Number(code), meaning ?? ""];
    });

describe("the exit codes: one table", () => {
  it.each(DOCS)("%s holds the table generated from ExitCodes", (path) => {
    expect(read(path)).toContain(`\n${exitCodesMarkdown()}\n`);
  });

  it("lists every code of ExitCodes and of a task killed by a signal under launch, once, in order", () => {
    const codes = markdownRows().map(([code]) => code);
    expect(codes).toEqual([...Object.values(ExitCodes), ...Object.values(SignalExitCodes)]);
    expect(codes).toEqual([0, 1, 2, 42, 43, 137, 143]);
    expect([ExitCodes.preempted, ExitCodes.chiefLost]).toEqual([PREEMPTION_EXIT_CODE, CHIEF_LOST_EXIT_CODE]);
  });

  it("--help says the same words (without the code spans), wrapped to 100 columns", () => {
    const lines = exitCodesHelp.split("\n");
    expect(lines[0]).toBe("Exit codes:");
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
    const words = (s: string): string => s.replace(/`/g, "").replace(/\s+/g, " ").trim();
    const help = words(lines.slice(1).join("\n"));
    for (const [code, meaning] of markdownRows()) expect(help).toContain(`${code} ${words(meaning)}`);
    const precedence = exitCodesMarkdown().split("\n\n")[1] ?? "";
    expect(precedence).toMatch(/^`launch` exits with the code of the task whose own termination notice started a preemption/);
    expect(help.endsWith(words(precedence))).toBe(true);
  });
});
