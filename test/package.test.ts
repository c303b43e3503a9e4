/** The package's public surface and the dependency rules between folders. */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  type: string;
  exports: Record<string, null | string | { types: string; import: string }>;
  dependencies: Record<string, string>;
  engines: { node: string };
};

const filesUnder = (dir: string): string[] =>
  readdirSync(join(root, dir)).flatMap((f) => {
    const rel = join(dir, f);
    return statSync(join(root, rel)).isDirectory() ? filesUnder(rel) : rel.endsWith(".ts") ? [rel] : [];
  });

const importsOf = (file: string): string[] =>
  [...readFileSync(join(root, file), "utf8").matchAll(/^(?:import|export)[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1] as string);

describe("package", () => {
  it("is ESM for Node 20 with runtime dependencies rxjs, fp-ts and io-ts", () => {
    expect(pkg.type).toBe("module");
    expect(pkg.engines.node).toBe(">=20");
    for (const d of ["rxjs", "fp-ts", "io-ts"]) expect(pkg.dependencies[d]).toBeDefined();
  });

  it("exports ., ./hooks, ./testing, ./config and ./tfjs with types; internals are blocked", () => {
    expect(Object.keys(pkg.exports).sort()).toEqual([".", "./config", "./hooks", "./internal/*", "./package.json", "./testing", "./tfjs"]);
    expect(pkg.exports["./internal/*"]).toBeNull();
    for (const key of [".", "./hooks", "./testing", "./config", "./tfjs"]) {
      const target = pkg.exports[key] as { types: string; import: string };
      expect(target.types.replace(/\.d\.ts$/, "")).toBe(target.import.replace(/\.js$/, ""));
      // dist/<path>.js is built from <path>.ts.
      const source = target.import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts");
      expect(existsSync(join(root, source)), source).toBe(true);
    }
  });

  it("hooks/ builds only on src/'s public modules, never on src/internal", () => {
    for (const f of filesUnder("hooks")) {
      for (const spec of importsOf(f)) {
        expect(spec, `${f} imports ${spec}`).not.toMatch(/src\/internal\//);
      }
    }
  });

  it("nothing in src/ imports hooks/ except the monitoredTrainingSession factory", () => {
    const offenders = filesUnder("src")
      .filter((f) => importsOf(f).some((s) => s.includes("/hooks/")))
      .filter((f) => !/monitoredTrainingSession\.ts$|[/\\]config[/\\]|[/\\]cli[/\\]/.test(f));
    expect(offenders).toEqual([]);
  });

  it("the core entry point does not load TensorFlow.js", () => {
    const reachable = new Set<string>();
    const visit = (file: string): void => {
      if (reachable.has(file)) return;
      reachable.add(file);
      for (const spec of importsOf(file)) {
        expect(spec, `${file} imports ${spec}`).not.toMatch(/^@tensorflow\//);
        if (spec.startsWith(".")) visit(join(file, "..", spec).replace(/\.js$/, ".ts"));
      }
    };
    visit("src/index.ts");
    expect(reachable.size).toBeGreaterThan(10);
  });
});
