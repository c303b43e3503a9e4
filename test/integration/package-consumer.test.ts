/**
 * The packed package as a fresh consumer meets it: `npm pack` in a clean copy of the tree (its
 * `prepack` builds dist/); a new ESM project (NodeNext, strict, no skipLibCheck) installs the
 * tarball with `npm install --prefer-offline` (dependencies from the npm cache), typechecks and
 * compiles a training program against every public entry point with this repository's
 * TypeScript, trains, resumes from the checkpoint, runs the bin, and throws inside the packed
 * build: every stack frame must resolve (through the shipped source maps) to a file that
 * exists in the package. Each subpath of the packed package exports exactly the names of its
 * committed list (test/fixtures/exports/, as test/package.exports.test.ts checks on the sources).
 *
 * Slow (a build and an install): one pack and one install shared by the tests of this file.
 */
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { LINEAR_GRAPH_SOURCE, root, spawnResult, type Result } from "../util/cli.js";
import { checkList, declaredExports, type ExportNames } from "../util/exportNames.js";

const hasNpm = spawnSync("npm", ["--version"], { encoding: "utf8" }).status === 0;
if (!hasNpm) console.warn("SKIPPED test/integration/package-consumer.test.ts: npm is not available");

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  name: string;
  version: string;
  bin: Record<string, string>;
  files: string[];
  exports: Record<string, null | string | { types: string; import: string }>;
  devDependencies: Record<string, string>;
};
const subpaths = Object.entries(pkg.exports).flatMap(([key, target]) => (target !== null && typeof target === "object" ? [key] : []));
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

/** A training program against the public API: Graph, the factory, a built-in hook, a checkpoint reader. */
const TRAIN = `import { Graph, monitoredTrainingSession, withSession } from "monitored-session";
import { latestCheckpoint } from "monitored-session/checkpoint";
import { StopAtStepHook } from "monitored-session/hooks";

const [checkpointDir = "runs/ckpt", lastStepText = "4"] = process.argv.slice(2);
const lastStep = Number(lastStepText);

${LINEAR_GRAPH_SOURCE}
let restoredStep: number | undefined;
const finalStep = await withSession(
  monitoredTrainingSession({
    graph,
    checkpointDir,
    saveCheckpointSteps: 2,
    saveSummariesSteps: null,
    logStepCountSteps: null,
    hooks: [new StopAtStepHook({ lastStep })],
  }),
  async (sess) => {
    let last = -1;
    while (!sess.shouldStop()) {
      // A fetched variable is read before the ops run: "before" is the step this run starts at.
      const r = await sess.run({ before: "global_step", after: "train" });
      restoredStep ??= Number(r.before);
      last = Number(r.after);
    }
    return last;
  },
);
console.log(JSON.stringify({ restoredStep, finalStep, latest: await latestCheckpoint(checkpointDir) }));
`;

/** Every other entry point, so that each one's types are checked as a consumer sees them. */
const SURFACE = `import { USE_DEFAULT, type Session, type SessionEvent } from "monitored-session";
import { CheckpointManager, type Saver } from "monitored-session/checkpoint";
import { Supervisor } from "monitored-session/compat/v1";
import { decodeConfig, type TrainingConfig } from "monitored-session/config";
import { NanTensorHook, type StopAtStepHookOptions } from "monitored-session/hooks";
import { PREEMPTION_EXIT_CODE, TerminationConfig } from "monitored-session/preemption";
import { SummaryWriter, scalarValue, type EventProto } from "monitored-session/summary";
import { FakeSession, VirtualClock } from "monitored-session/testing";

export const surface: readonly unknown[] = [USE_DEFAULT, CheckpointManager, Supervisor, decodeConfig, NanTensorHook, PREEMPTION_EXIT_CODE, TerminationConfig, SummaryWriter, scalarValue, FakeSession, VirtualClock];
export type Types = [Session, SessionEvent, Saver, TrainingConfig, StopAtStepHookOptions, EventProto];
`;

/** Errors thrown in three places of the packed build; prints each one's stack frames. */
const TRACE = `import { Graph, withSession } from "monitored-session";
import { readBundle } from "monitored-session/checkpoint";
import { StopAtStepHook } from "monitored-session/hooks";

const frames = (e: unknown): string[] => (e instanceof Error ? (e.stack ?? "").split("\\n").slice(1).map((l) => l.trim()) : [String(e)]);
const stacks: Record<string, string[]> = {};

try {
  new StopAtStepHook({});
} catch (e) {
  stacks["hook options"] = frames(e);
}

const graph = new Graph();
graph.globalStep();
graph.op("boom", () => {
  throw new RangeError("boom");
});
try {
  await withSession({ graph }, (sess) => sess.run("boom"));
} catch (e) {
  stacks["an op failing in a run"] = frames(e);
}

try {
  await readBundle("missing/model.ckpt-1");
} catch (e) {
  stacks["a missing checkpoint"] = frames(e);
}
console.log(JSON.stringify(stacks));
`;

/** The file, line and column of a stack frame, or `undefined` for Node's own frames. */
const locationOf = (frame: string): { file: string; line: number } | undefined => {
  const m = /(?:\(|^at )((?:file:\/\/)?\/[^()]*?):(\d+):(\d+)\)?$/.exec(frame);
  if (m === null) return undefined;
  const file = (m[1] as string).startsWith("file://") ? fileURLToPath(m[1] as string) : (m[1] as string);
  return { file, line: Number(m[2]) };
};

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]));

describe.skipIf(!hasNpm)("the packed package in a fresh consumer project", () => {
  let work = "";
  let project = "";
  let installedPkg = "";
  let tarballFiles: string[] = [];
  const env: NodeJS.ProcessEnv = { ...process.env, CI: "true", npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" };
  delete env["NODE_OPTIONS"];
  const inProject = (command: string, args: readonly string[], timeoutMs = 60_000): Promise<Result> =>
    spawnResult(command, args, { cwd: project, env, timeoutMs });

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "ms-consumer-"));
    // A clean copy of what a clone has (no dist/), so that this build races no other test's
    // pack in the repository; node_modules is the repository's.
    const clone = join(work, "clone");
    for (const f of ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", ...pkg.files.filter((f) => f !== "dist")]) {
      cpSync(join(root, f), join(clone, f), { recursive: true });
    }
    symlinkSync(join(root, "node_modules"), join(clone, "node_modules"), "dir");
    // prepack builds dist/, so the tarball carries the compiled code of this tree.
    const packed = await spawnResult("npm", ["pack", "--pack-destination", work], { cwd: clone, env, timeoutMs: 480_000 });
    expect(packed.code, packed.stderr).toBe(0);
    const tarball = join(work, `${pkg.name}-${pkg.version}.tgz`);
    expect(existsSync(tarball), `npm pack made ${readdirSync(work).join(", ")}`).toBe(true);
    tarballFiles = spawnSync("tar", ["-tzf", tarball], { encoding: "utf8" }).stdout.split("\n").filter((f) => f !== "");

    project = join(work, "consumer");
    mkdirSync(join(project, "src"), { recursive: true });
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" }, null, 2));
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify(
        {
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            exactOptionalPropertyTypes: true,
            skipLibCheck: false,
            types: ["node"],
            rootDir: "src",
            outDir: "out",
          },
          include: ["src"],
        },
        null,
        2,
      ),
    );
    writeFileSync(join(project, "src", "train.ts"), TRAIN);
    writeFileSync(join(project, "src", "surface.ts"), SURFACE);
    writeFileSync(join(project, "src", "trace.ts"), TRACE);
    // The dependencies come from the npm cache (the registry only for what it lacks).
    const installed = await inProject(
      "npm",
      ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball, `@types/node@${pkg.devDependencies["@types/node"] as string}`],
      360_000,
    );
    expect(installed.code, installed.stderr).toBe(0);
    installedPkg = join(project, "node_modules", pkg.name);
  }, 900_000);

  afterAll(() => {
    if (work !== "") rmSync(work, { recursive: true, force: true });
  });

  it("ships the compiled code, its sources and every exports target; no tests", () => {
    const files = tarballFiles.map((f) => f.replace(/^package\//, ""));
    for (const key of subpaths) {
      const target = pkg.exports[key] as { types: string; import: string };
      for (const f of [target.import, target.types]) expect(files, `${key} → ${f}`).toContain(f.replace(/^\.\//, ""));
    }
    expect(files).toContain((pkg.bin["monitored-session"] as string).replace(/^\.\//, ""));
    expect(files).toContain("src/pipeline/MonitoredSession.ts");
    expect(files).toContain("hooks/StopAtStepHook.ts");
    expect(files.filter((f) => /^(test|bench|examples|scripts)\//.test(f) || f.startsWith("dist/test/"))).toEqual([]);
    // dist/ holds exactly what the sources compile to: nothing stale from moved modules.
    const compiled = files.filter((f) => f.startsWith("dist/") && f.endsWith(".js")).map((f) => f.replace(/^dist\//, "").replace(/\.js$/, ".ts"));
    expect(compiled.filter((f) => !files.includes(f))).toEqual([]);
  });

  it("typechecks (strict, NodeNext, lib check on) and compiles against every entry point", async () => {
    const built = await inProject(process.execPath, [tsc, "-p", "tsconfig.json"], 240_000);
    expect(built.stdout + built.stderr).toBe("");
    expect(built.code).toBe(0);
    // The compiled consumer loads every subpath except tfjs (an optional peer, not installed).
    const loaded = await inProject(process.execPath, ["out/surface.js"]);
    expect(loaded.stderr).toBe("");
    expect(loaded.code).toBe(0);
  }, 300_000);

  it("trains, then resumes from its checkpoint; the bin inspects the directory", async () => {
    const first = await inProject(process.execPath, ["out/train.js", "runs/ckpt", "4"]);
    expect(first.code, first.stderr).toBe(0);
    const one = JSON.parse(first.stdout.trim().split("\n").pop() as string) as { restoredStep: number; finalStep: number; latest: string };
    expect(one).toMatchObject({ restoredStep: 0, finalStep: 4 });
    expect(one.latest).toMatch(/model\.ckpt-4$/);

    const second = await inProject(process.execPath, ["out/train.js", "runs/ckpt", "7"]);
    expect(second.code, second.stderr).toBe(0);
    const two = JSON.parse(second.stdout.trim().split("\n").pop() as string) as { restoredStep: number; finalStep: number; latest: string };
    expect(two).toMatchObject({ restoredStep: 4, finalStep: 7 });
    expect(two.latest).toMatch(/model\.ckpt-7$/);

    const help = await inProject("npx", ["--no", "--", "monitored-session", "--help"]);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/Usage: monitored-session/);
    const inspected = await inProject("npx", ["--no", "--", "monitored-session", "inspect", "--json", "runs/ckpt"]);
    expect(inspected.code, inspected.stderr).toBe(0);
    const reports = JSON.parse(inspected.stdout) as { step: number | null; latest: boolean; status: string }[];
    expect(reports.find((r) => r.latest)).toMatchObject({ step: 7, status: "ok" });
  }, 300_000);

  it("the bin's board serves its page and every asset from the installed package (uPlot from its dependency), offline", async () => {
    const logdir = join(project, "boardlogs");
    mkdirSync(logdir, { recursive: true });
    const bin = join(installedPkg, (pkg.bin["monitored-session"] as string).replace(/^\.\//, ""));
    const child = spawn(process.execPath, [bin, "board", logdir, "--port", "0"], { cwd: project, env, stdio: ["ignore", "pipe", "pipe"] });
    try {
      let out = "";
      const url = await new Promise<string>((resolveUrl, reject) => {
        const timer = setTimeout(() => reject(new Error(`no URL within 60 s; output: ${out}`)), 60_000);
        const onData = (d: Buffer): void => {
          out += d.toString();
          const m = /http:\/\/127\.0\.0\.1:\d+\/?\S*/.exec(out);
          if (m !== null) {
            clearTimeout(timer);
            resolveUrl(m[0]);
          }
        };
        child.stdout.on("data", onData);
        child.stderr.on("data", onData);
        child.once("exit", (code) => reject(new Error(`the board exited with ${String(code)}: ${out}`)));
      });
      const origin = new URL(url).origin;
      const page = await fetch(url);
      expect(page.status).toBe(200);
      const html = await page.text();
      // Every script and stylesheet the page names, and uPlot, come from the package.
      const assets = [...html.matchAll(/(?:src|href)="(board\/[^"]+)"/g)].map((m) => `/${m[1] as string}`);
      expect(assets.length).toBeGreaterThan(0);
      for (const path of [...assets, "/board/uplot/uPlot.esm.js", "/board/uplot/uPlot.min.css", "/board/page/views.js", "/board/page/histograms.js", "/board/page/checkpoints.js"]) {
        const r = await fetch(`${origin}${path}`);
        expect(r.status, path).toBe(200);
        expect((await r.arrayBuffer()).byteLength, path).toBeGreaterThan(0);
      }
    } finally {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once("exit", r)));
    }
  }, 120_000);

  it("resolves every stack frame of an error thrown in the packed build to a file the package ships", async () => {
    const traced = await inProject(process.execPath, ["--enable-source-maps", "out/trace.js"]);
    expect(traced.code, traced.stderr).toBe(0);
    const stacks = JSON.parse(traced.stdout.trim().split("\n").pop() as string) as Record<string, string[]>;
    expect(Object.keys(stacks).sort()).toEqual(["a missing checkpoint", "an op failing in a run", "hook options"]);
    const pkgDir = resolve(installedPkg) + sep;
    for (const [what, frames] of Object.entries(stacks)) {
      const located = frames.map((f) => ({ frame: f, at: locationOf(f) })).filter((x) => x.at !== undefined);
      const inPackage = located.filter((x) => (x.at?.file as string).startsWith(pkgDir));
      expect(inPackage.length, `${what}: no frame in the package:\n${frames.join("\n")}`).toBeGreaterThan(0);
      for (const { frame, at } of located) expect(existsSync(at?.file as string), `${what}: ${frame}`).toBe(true);
      // Through the source maps, the package's frames name its TypeScript sources, not dist/.
      for (const { frame, at } of inPackage) expect(relative(pkgDir, at?.file as string), `${what}: ${frame}`).toMatch(/^(src|hooks)\/.*\.ts$/);
    }
  }, 120_000);

  it("each subpath exports exactly the names of its committed list, in its declarations and at run time", async () => {
    const declarationOf = (key: string): string => join(installedPkg, (pkg.exports[key] as { types: string }).types);
    const declared = declaredExports(subpaths.map(declarationOf), {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      skipLibCheck: true,
    });
    // Each subpath loaded by name in a plain Node process of the consumer; tfjs only where its
    // optional peer is installed (it is not, here).
    const script = `const out = {};
for (const key of ${JSON.stringify(subpaths)}) {
  const name = "${pkg.name}" + key.slice(1);
  try {
    out[key] = Object.keys(await import(name)).sort();
  } catch (e) {
    if (!(e.code === "ERR_MODULE_NOT_FOUND" && e.message.includes("@tensorflow/"))) throw e;
  }
}
console.log(JSON.stringify(out));`;
    const loaded = await inProject(process.execPath, ["--input-type=module", "-e", script]);
    expect(loaded.code, loaded.stderr).toBe(0);
    const runtime = JSON.parse(loaded.stdout.trim().split("\n").pop() as string) as Record<string, string[]>;
    expect(Object.keys(runtime).length).toBeGreaterThanOrEqual(subpaths.length - 1);
    const problems = subpaths.flatMap((key) => {
      const names = declared.get(declarationOf(key)) as ExportNames;
      const problem = checkList(key, names, `the packed package's ${(pkg.exports[key] as { types: string }).types}`);
      const atRunTime = runtime[key];
      const mismatch =
        atRunTime !== undefined && JSON.stringify(atRunTime) !== JSON.stringify(names.values)
          ? [`${key}: at run time ${atRunTime.join(", ")}; its declarations' values ${names.values.join(", ")}`]
          : [];
      return [...(problem === undefined ? [] : [problem]), ...mismatch];
    });
    expect(problems, problems.join("\n\n")).toEqual([]);
  }, 120_000);

  it("every source map in the package names sources that it ships", () => {
    const maps = filesUnder(join(installedPkg, "dist")).filter((f) => f.endsWith(".map"));
    expect(maps.length).toBeGreaterThan(50);
    const missing = maps.flatMap((m) => {
      const map = JSON.parse(readFileSync(m, "utf8")) as { sources: string[]; sourceRoot?: string };
      return map.sources.map((s) => resolve(dirname(m), map.sourceRoot ?? "", s)).filter((s) => !existsSync(s));
    });
    expect(missing).toEqual([]);
  });
});
