/**
 * Nothing becomes public by accident: every subpath of package.json's `exports` map exports
 * exactly the names committed in test/fixtures/exports/<subpath>.txt, type-only names included.
 * Here on the sources the subpaths are built from; test/integration/package-consumer.test.ts
 * checks the packed package's dist/ against the same lists.
 *
 * A deliberate change: `UPDATE_EXPORTS=1 npx vitest run test/package.exports.test.ts` rewrites
 * the lists; review the diff and note it in CHANGELOG.md.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";

import { checkList, declaredExports, formatList, LISTS_DIR, listFile, parseList, repositoryCompilerOptions, type ExportNames } from "./util/exportNames.js";

const root = join(import.meta.dirname, "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  exports: Record<string, null | string | { types: string; import: string }>;
};
const subpaths = Object.entries(pkg.exports).flatMap(([key, target]) => (target !== null && typeof target === "object" ? [key] : []));

/** The source of an exports target: dist/<path>.js is built from <path>.ts. */
const sourceOf = (key: string): string => join(root, (pkg.exports[key] as { import: string }).import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts"));

describe("the public names of each entry point (test/fixtures/exports/)", () => {
  let declared = new Map<string, ExportNames>();
  beforeAll(() => {
    declared = declaredExports(subpaths.map(sourceOf), repositoryCompilerOptions(root));
  }, 60_000);

  it("every subpath has a list, and every list a subpath", () => {
    expect(subpaths.length).toBeGreaterThan(10);
    const lists = readdirSync(LISTS_DIR).filter((f) => f.endsWith(".txt")).map((f) => join(LISTS_DIR, f));
    expect(lists.sort()).toEqual(subpaths.map(listFile).sort());
  });

  it.each(subpaths)("%s: exports the names of its list, and at run time exactly its values", async (subpath) => {
    const names = declared.get(sourceOf(subpath)) as ExportNames;
    expect(names.values.length + names.types.length, subpath).toBeGreaterThan(0);
    const problem = checkList(subpath, names, sourceOf(subpath).slice(root.length + 1));
    if (problem !== undefined) expect.fail(problem);
    const loaded = Object.keys((await import(sourceOf(subpath))) as Record<string, unknown>).sort();
    expect(loaded, `${subpath}: the names its module holds at run time are the values TypeScript sees`).toEqual([...names.values]);
  }, 60_000);

  it("a name added to or removed from an entry point fails with the command that accepts it", () => {
    const committed = parseList(readFileSync(listFile("./cluster"), "utf8"));
    expect(committed.types).toContain("ClusterDict");
    const changed: ExportNames = { values: [...committed.values, "pyRepr"], types: committed.types.filter((n) => n !== "ClusterDict") };
    const saved = process.env["UPDATE_EXPORTS"];
    delete process.env["UPDATE_EXPORTS"];
    try {
      const message = checkList("./cluster", changed, "a test") as string;
      expect(message).toMatch(/^monitored-session\/cluster \(a test\) no longer exports what test\/fixtures\/exports\/cluster\.txt lists\./);
      expect(message).toMatch(/public now, not in the list: pyRepr\n/);
      expect(message).toMatch(/in the list, not exported: type ClusterDict\n/);
      expect(message).toContain("UPDATE_EXPORTS=1 npx vitest run test/package.exports.test.ts");
    } finally {
      if (saved !== undefined) process.env["UPDATE_EXPORTS"] = saved;
    }
    expect(formatList("./compat/v1", { values: ["Supervisor"], types: ["SupervisorOptions"] })).toMatch(/\nSupervisor\ntype SupervisorOptions\n$/);
  });
});
