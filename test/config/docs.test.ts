import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { CONFIG_DOCS_PATH, renderConfigReference } from "../../scripts/gen-config-docs.js";
import { exitCodesMarkdown } from "../../src/runtime/exitCodes.js";

describe("docs/configuration.md", () => {
  it("is what scripts/gen-config-docs.ts generates from the codecs (run it after changing a codec)", () => {
    expect(readFileSync(CONFIG_DOCS_PATH, "utf8")).toBe(renderConfigReference());
  });

  it("documents every field of every section and hook", () => {
    const doc = renderConfigReference();
    for (const key of ["`checkpoint.saveSteps`", "`summaries.dir`", "`preemption.exitCode`", "`lastStep`", "`lossTensor`", "`everyNSecs`"]) expect(doc).toContain(key);
    expect(doc).toContain(exitCodesMarkdown());
  });
});
