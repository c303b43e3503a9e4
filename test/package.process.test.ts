/**
 * The package's public surface, and the layer rules between folders as dependency-cruiser
 * checks them (.dependency-cruiser.cjs, run by `npm run lint`): the repository passes, and a
 * fixture with one violation of each kind fails with that rule.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");

const filesUnder = (dir: string): string[] =>
  readdirSync(join(root, dir)).flatMap((f) => {
    const rel = join(dir, f);
    return statSync(join(root, rel)).isDirectory() ? filesUnder(rel) : rel.endsWith(".ts") ? [rel] : [];
  });

interface Violation {
  readonly from: string;
  readonly to: string;
  readonly rule: { readonly name: string };
}

/** Runs dependency-cruiser with the repository's rules on `dirs` under `cwd`. */
const cruise = (cwd: string, dirs: readonly string[], outputType: "json" | "err" = "json"): { status: number | null; violations: Violation[] } => {
  const bin = join(root, "node_modules", "dependency-cruiser", "bin", "dependency-cruise.mjs");
  const r = spawnSync(process.execPath, [bin, ...dirs, "--config", join(root, ".dependency-cruiser.cjs"), "--output-type", outputType], {
    cwd,
    encoding: "utf8",
    timeout: 120_000,
  });
  if (r.stdout === "") throw new Error(`dependency-cruiser printed nothing: ${r.stderr}`);
  if (outputType === "err") return { status: r.status, violations: [] };
  const out = JSON.parse(r.stdout) as { summary: { violations: Violation[] } };
  return { status: r.status, violations: out.summary.violations };
};

describe("layers (dependency-cruiser)", () => {
  const fixtures: string[] = [];
  afterAll(() => {
    for (const d of fixtures) rmSync(d, { recursive: true, force: true });
  });

  it("the repository has no violation and no cycle", () => {
    const { status, violations } = cruise(root, ["src", "hooks"]);
    expect(violations).toEqual([]);
    expect(status).toBe(0);
    expect(filesUnder("src").length).toBeGreaterThan(50);
  }, 120_000);

  it("catches an import against the layers (type-only ones too), one from a core floor to a floor above it, a cycle, a folder it does not know, the root barrel re-exporting a subpath's area, and the CLI past the runtime's index", () => {
    const dir = mkdtempSync(join(tmpdir(), "ms-layers-"));
    fixtures.push(dir);
    const files: Record<string, string> = {
      "tsconfig.json": JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true }, include: ["src", "hooks"] }),
      "package.json": JSON.stringify({ name: "fixture", type: "module" }),
      // Core → hooks, type-only.
      "src/session/Session.ts": 'import type { Hook } from "../../hooks/Hook.js";\nexport type Session = { hook?: Hook };\n',
      // Core floors: the session contract → the pipeline above it (type-only), checkpoint → the
      // hook API above it; the pipeline → the session contract and checkpoint below it is allowed.
      "src/session/Tensor.ts": 'import type { Run } from "../pipeline/Run.js";\nexport type Tensor = { run?: Run };\n',
      "src/checkpoint/Saver.ts": 'import { hook } from "../hook/Hook.js";\nexport const saver = hook;\n',
      "src/hook/Hook.ts": "export const hook = 2;\n",
      "src/pipeline/Run.ts": 'import type { Session } from "../session/Session.js";\nimport { saver } from "../checkpoint/Saver.js";\nexport type Run = { s?: Session; n: typeof saver };\n',
      // hooks → layer 2.
      "hooks/Hook.ts": 'import { train } from "../src/training/train.js";\nexport interface Hook { readonly t: typeof train }\n',
      // Layer 2 → layer 3, and layer 2 → a sibling of layer 2.
      "src/training/train.ts": 'import { config } from "../config/config.js";\nimport { notice } from "../preemption/notice.js";\nexport const train = [config, notice];\n',
      "src/preemption/notice.ts": "export const notice = 1;\n",
      "src/config/config.ts": "export const config = 3;\n",
      // A cycle made of type-only imports.
      "src/coordinator/a.ts": 'import type { B } from "./b.js";\nexport type A = { b?: B };\n',
      "src/coordinator/b.ts": 'import type { A } from "./a.js";\nexport type B = { a?: A };\n',
      // A folder the rules do not place.
      "src/newarea/x.ts": 'import { notice } from "../preemption/notice.js";\nexport const x = notice;\n',
      // `.` re-exporting the config area, which has its own subpath.
      "src/index.ts": 'export { config } from "./config/config.js";\nexport type { Session } from "./session/Session.js";\n',
      // hooks/internal used from outside hooks/.
      "hooks/internal/util.ts": "export const util = 1;\n",
      "src/config/usesHookInternals.ts": 'import { util } from "../../hooks/internal/util.js";\nexport const u = util;\n',
      // The runtime: the CLI only through its index; nothing below it (preemption) and not the CLI above it.
      "src/cli/run.ts": "export const run = 1;\n",
      "src/runtime/task.ts": 'import { run } from "../cli/run.js";\nexport const task = run;\n',
      "src/runtime/index.ts": 'export { task } from "./task.js";\n',
      "src/cli/deep.ts": 'import { task } from "../runtime/task.js";\nexport const deep = task;\n',
      "src/cli/ok.ts": 'import { task } from "../runtime/index.js";\nexport const ok = task;\n',
      "src/preemption/usesRuntime.ts": 'import { task } from "../runtime/index.js";\nexport const r = task;\n',
    };
    for (const [f, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, f)), { recursive: true });
      writeFileSync(join(dir, f), text);
    }
    const { status, violations } = cruise(dir, ["src", "hooks"]);
    const found = violations.map((v) => `${v.rule.name}: ${v.from} → ${v.to}`).sort();
    expect(found).toEqual(
      [
        "hooks-internal-is-private: src/config/usesHookInternals.ts → hooks/internal/util.ts",
        "no-circular: src/coordinator/a.ts → src/coordinator/b.ts",
        "not-in-allowed: hooks/Hook.ts → src/training/train.ts",
        "not-in-allowed: src/session/Session.ts → hooks/Hook.ts",
        "not-in-allowed: src/session/Tensor.ts → src/pipeline/Run.ts",
        "not-in-allowed: src/checkpoint/Saver.ts → src/hook/Hook.ts",
        "not-in-allowed: src/index.ts → src/config/config.ts",
        "not-in-allowed: src/newarea/x.ts → src/preemption/notice.ts",
        "not-in-allowed: src/runtime/task.ts → src/cli/run.ts",
        "not-in-allowed: src/cli/deep.ts → src/runtime/task.ts",
        "not-in-allowed: src/preemption/usesRuntime.ts → src/runtime/index.ts",
        "not-in-allowed: src/training/train.ts → src/config/config.ts",
        "not-in-allowed: src/training/train.ts → src/preemption/notice.ts",
      ].sort(),
    );
    // The JSON report exits 0; the default report (what `npm run lint` prints) fails the command.
    expect(status).toBe(0);
    expect(cruise(dir, ["src", "hooks"], "err").status).not.toBe(0);
  }, 120_000);
});
