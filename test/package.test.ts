/**
 * The package's public surface, and the layer rules between folders as dependency-cruiser
 * checks them (.dependency-cruiser.cjs, run by `npm run lint`): the repository passes, and a
 * fixture with one violation of each kind fails with that rule.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  type: string;
  version: string;
  exports: Record<string, null | string | { types: string; import: string }>;
  dependencies: Record<string, string>;
  engines: { node: string };
  scripts: Record<string, string>;
};

const SUBPATHS = [".", "./checkpoint", "./cluster", "./compat/v1", "./config", "./hooks", "./preemption", "./runtime", "./summary", "./testing", "./tfjs"];

/** The source of an exports target: dist/<path>.js is built from <path>.ts. */
const sourceOf = (key: string): string => {
  const target = pkg.exports[key] as { types: string; import: string };
  return target.import.replace(/^\.\/dist\//, "").replace(/\.js$/, ".ts");
};

const filesUnder = (dir: string): string[] =>
  readdirSync(join(root, dir)).flatMap((f) => {
    const rel = join(dir, f);
    return statSync(join(root, rel)).isDirectory() ? filesUnder(rel) : rel.endsWith(".ts") ? [rel] : [];
  });

describe("package", () => {
  it("is ESM for Node 20 with runtime dependencies rxjs, fp-ts and io-ts, at 0.2.0", () => {
    expect(pkg.type).toBe("module");
    expect(pkg.engines.node).toBe(">=20");
    expect(pkg.version).toBe("0.2.0");
    for (const d of ["rxjs", "fp-ts", "io-ts"]) expect(pkg.dependencies[d]).toBeDefined();
  });

  it("exports the core and one subpath per separable area, with types; internals are blocked", () => {
    expect(Object.keys(pkg.exports).sort()).toEqual([...SUBPATHS, "./internal/*", "./package.json"].sort());
    expect(pkg.exports["./internal/*"]).toBeNull();
    for (const key of SUBPATHS) {
      const target = pkg.exports[key] as { types: string; import: string };
      expect(target.types.replace(/\.d\.ts$/, "")).toBe(target.import.replace(/\.js$/, ""));
      expect(existsSync(join(root, sourceOf(key))), sourceOf(key)).toBe(true);
    }
  });

  it("entry points name what they export (no `export *`), grouped under comment headers", () => {
    for (const key of SUBPATHS) {
      const text = readFileSync(join(root, sourceOf(key)), "utf8");
      expect(text, sourceOf(key)).not.toMatch(/export\s+\*/);
      expect(text, sourceOf(key)).toMatch(/^\/\* [A-Z][^*]* \*\/$/m);
    }
  });

  it("`.` keeps the core: the wire helpers, the checkpoint and summary areas and the Supervisor have moved out", async () => {
    const core = (await import("../src/index.js")) as Record<string, unknown>;
    for (const name of ["MonitoredSession", "monitoredTrainingSession", "Graph", "Coordinator", "SessionRunArgs", "silentLogger"]) {
      expect(core[name], name).toBeDefined();
    }
    for (const name of ["frameRecord", "maskCrc32c", "encodeEvent", "CheckpointManager", "SummaryWriter", "Supervisor", "PreemptionCheckpointHandler", "mergeRunOptions"]) {
      expect(core[name], name).toBeUndefined();
    }
    const summary = (await import("../src/summary/index.js")) as Record<string, unknown>;
    for (const name of ["frameRecord", "maskCrc32c", "encodeEvent", "crc32c"]) expect(summary[name], name).toBeUndefined();
  });

  it("`npm run lint` runs dependency-cruiser and knip; .ci/run runs it", () => {
    expect(pkg.scripts["lint"]).toMatch(/lint:layers/);
    expect(pkg.scripts["lint:layers"]).toMatch(/^depcruise src hooks --config \.dependency-cruiser\.cjs$/);
    expect(pkg.scripts["lint:exports"]).toBe("knip");
    expect(readFileSync(join(root, ".ci", "run"), "utf8")).toMatch(/npm run --silent lint/);
  });

  it("the core entry point does not load TensorFlow.js", () => {
    const reachable = new Set<string>();
    const visit = (file: string): void => {
      if (reachable.has(file)) return;
      reachable.add(file);
      const specs = [...readFileSync(join(root, file), "utf8").matchAll(/^(?:import|export)[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1] as string);
      for (const spec of specs) {
        expect(spec, `${file} imports ${spec}`).not.toMatch(/^@tensorflow\//);
        if (spec.startsWith(".")) visit(join(dirname(file), spec).replace(/\.js$/, ".ts"));
      }
    };
    visit("src/index.ts");
    expect(reachable.size).toBeGreaterThan(10);
  });
});

