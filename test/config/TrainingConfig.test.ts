import { isLeft, isRight, left, right } from "fp-ts/lib/Either.js";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { StopAtStepHook } from "../../hooks/StopAtStepHook.js";
import {
  checkNames,
  ConfigError,
  decodeConfig,
  defineJob,
  formatIssue,
  HookRegistry,
  loadConfig,
  MAX_ALIAS_COUNT,
  parseConfigText,
  PositiveInt,
  required,
  struct,
  toMonitoredTrainingSessionOptions,
  type ConfigIssue,
} from "../../src/config/index.js";
import { Graph } from "../../src/index.js";
import { readConfig } from "../../src/config/loadConfig.js";
import { PreemptionExitCode } from "../../src/config/TrainingConfig.js";
import { SessionRunHook } from "../../src/hook/SessionRunHook.js";
import { ExitCodes } from "../../src/runtime/exitCodes.js";

const issues = (input: unknown, registry?: HookRegistry): string[] => {
  const r = decodeConfig(input, registry);
  if (!isLeft(r)) throw new Error("expected problems");
  return r.left.map(formatIssue);
};

describe("decodeConfig", () => {
  it("accepts a full configuration and derives the typed value", () => {
    const r = decodeConfig({
      module: "./train.ts",
      isChief: true,
      master: "",
      checkpoint: { dir: "runs", saveSteps: 100, maxToKeep: null, basename: "m.ckpt", async: "coalesce" },
      summaries: { dir: "logs", saveSecs: 30 },
      logStepCountSteps: 0,
      stopGracePeriodSecs: 5,
      maxWaitSecs: 10,
      lastStep: 1000,
      hooks: [{ type: "StopAtStepHook", numSteps: 5 }, { type: "LoggingTensorHook", tensors: { loss: "loss" }, everyNSecs: 1.5 }],
      preemption: { enabled: true, gracePeriodSecs: 0, exitCode: 42, watchFile: "stop" },
    });
    expect(isRight(r)).toBe(true);
    if (isRight(r)) {
      expect(r.right.checkpoint?.saveSteps).toBe(100);
      expect(r.right.hooks?.[1]).toEqual({ type: "LoggingTensorHook", tensors: { loss: "loss" }, everyNSecs: 1.5 });
    }
  });

  it("reports every problem at once, each with its path", () => {
    expect(
      issues({
        module: 3,
        checkpoint: { dir: "" },
        lastStep: -1,
        hooks: [{ type: "StopAtStepHook", lastStep: 1 }, { type: "LoggingTensorHook", tensors: ["loss"], everyNSecs: -1 }, { type: "Nope" }],
        preemption: { exitCode: 300 },
      }),
    ).toEqual([
      "module: expected a non-empty string, got 3",
      'checkpoint.dir: expected a non-empty string, got ""',
      "lastStep: expected an integer >= 0, got -1",
      "hooks[1].everyNSecs: expected a positive number, got -1",
      expect.stringMatching(/^hooks\[2\]\.type: unknown hook type "Nope"; registered: StopAtStepHook, /),
      "preemption.exitCode: expected an exit code from 3 to 127, got 300 (0 done, 1 failure, 2 bad usage, 43 chief lost and ≥ 128 a signal are reserved); pick another code from 3 to 127, such as the default 42",
    ]);
  });

  it("rejects unknown keys at every level, naming them and suggesting the likely key", () => {
    const out = issues({ module: "m.ts", lastSteps: 3, checkpoint: { dir: "d", saveStep: 3 }, hooks: [{ type: "NanTensorHook", lossTensor: "loss", failOnNan: true }] });
    expect(out).toHaveLength(3);
    expect(out[0]).toMatch(/^lastSteps: unknown field "lastSteps" \(did you mean "lastStep"\?\)/);
    expect(out[1]).toMatch(/^checkpoint\.saveStep: unknown field "saveStep" \(did you mean "saveSteps"\?\)/);
    expect(out[2]).toMatch(/^hooks\[0\]\.failOnNan: unknown field "failOnNan"/);
  });

  it("suggests the likely hook type for a misspelled one, as for a misspelled field (a user's type included)", () => {
    expect(issues({ module: "m", hooks: [{ type: "NanTensorHok", lossTensor: "loss" }, { type: "stepcounterhook" }, { type: "Nope" }, { type: 7 }] })).toEqual([
      expect.stringMatching(/^hooks\[0\]\.type: unknown hook type "NanTensorHok" \(did you mean "NanTensorHook"\?\); registered: StopAtStepHook, /),
      expect.stringMatching(/^hooks\[1\]\.type: unknown hook type "stepcounterhook" \(did you mean "StepCounterHook"\?\); registered: /),
      expect.stringMatching(/^hooks\[2\]\.type: unknown hook type "Nope"; registered: /),
      expect.stringMatching(/^hooks\[3\]\.type: unknown hook type 7; registered: /),
    ]);
    const registry = HookRegistry.withBuiltins().register({ type: "EarlyStoppingHook", codec: struct("EarlyStoppingHook", "test hook", {}), create: () => new SessionRunHook() });
    expect(issues({ module: "m", hooks: [{ type: "EarlyStopingHook" }] }, registry)).toEqual([
      expect.stringMatching(/^hooks\[0\]\.type: unknown hook type "EarlyStopingHook" \(did you mean "EarlyStoppingHook"\?\); registered: .*EarlyStoppingHook$/),
    ]);
  });

  it("rejects keys that are names of Object.prototype members (constructor, toString) as unknown", () => {
    const out = issues(JSON.parse('{"module":"m.ts","constructor":1,"checkpoint":{"dir":"d","toString":"x"},"hooks":[{"type":"NanTensorHook","lossTensor":"loss","hasOwnProperty":2}]}'));
    expect(out).toHaveLength(3);
    expect(out[0]).toMatch(/^constructor: unknown field "constructor"/);
    expect(out[1]).toMatch(/^checkpoint\.toString: unknown field "toString"/);
    expect(out[2]).toMatch(/^hooks\[0\]\.hasOwnProperty: unknown field "hasOwnProperty"/);
  });

  it("reports secs and steps given together, naming both, for checkpoints, summaries and hooks", () => {
    expect(
      issues({
        module: "m.ts",
        checkpoint: { dir: "d", saveSecs: 60, saveSteps: 100 },
        summaries: { saveSecs: 0, saveSteps: 10 },
        hooks: [{ type: "StepCounterHook", everyNSteps: 10, everyNSecs: 1 }],
      }),
    ).toEqual([
      "checkpoint: give only one of saveSecs and saveSteps (got saveSecs: 60, saveSteps: 100)",
      "summaries: give only one of saveSecs and saveSteps (got saveSecs: 0, saveSteps: 10)",
      "hooks[0]: give only one of everyNSteps and everyNSecs (got everyNSteps: 10, everyNSecs: 1)",
    ]);
  });

  it("reports a missing required field and a non-object root", () => {
    expect(issues({})).toEqual(["module: is required (a non-empty string)"]);
    expect(issues(null)).toEqual(["(root): expected an object (TrainingConfig), got null"]);
    expect(issues({ module: "m", hooks: [{ type: "NanTensorHook" }] })).toEqual(["hooks[0].lossTensor: is required (a non-empty string)"]);
  });

  it("decodes hook types registered by the user, with their codec", () => {
    const registry = HookRegistry.withBuiltins().register({
      type: "EveryNHook",
      codec: struct("EveryNHook", "test hook", { n: required(PositiveInt, "n") }),
      create: () => new SessionRunHook(),
    });
    expect(isRight(decodeConfig({ module: "m", hooks: [{ type: "EveryNHook", n: 3 }] }, registry))).toBe(true);
    expect(issues({ module: "m", hooks: [{ type: "EveryNHook", n: 0, m: 1 }] }, registry)).toEqual([
      expect.stringMatching(/^hooks\[0\]\.m: unknown field "m"/),
      "hooks[0].n: expected a positive integer, got 0",
    ]);
    // not in the built-ins
    expect(issues({ module: "m", hooks: [{ type: "EveryNHook", n: 3 }] })[0]).toMatch(/unknown hook type "EveryNHook"/);
    expect(() => HookRegistry.builtins.register({ type: "X", codec: PositiveInt, create: () => new SessionRunHook() })).toThrow(/cannot be changed/);
    expect(() => registry.register({ type: "EveryNHook", codec: PositiveInt, create: () => new SessionRunHook() })).toThrow(/already registered/);
  });
});

describe("decodeConfig: the tfjs section", () => {
  it("accepts tfjs.backend cpu and wasm, and a tfjs section without a backend", () => {
    for (const backend of ["cpu", "wasm"] as const) {
      const r = decodeConfig({ module: "m", tfjs: { backend } });
      expect(isRight(r) && r.right.tfjs?.backend).toBe(backend);
    }
    const empty = decodeConfig({ module: "m", tfjs: {} });
    expect(isRight(empty) && empty.right.tfjs).toEqual({});
    const none = decodeConfig({ module: "m" });
    expect(isRight(none) && none.right.tfjs).toBeUndefined();
  });

  it("rejects other backends, wrong types and unknown keys, listing each with its path among the other problems", () => {
    expect(issues({ module: "m", tfjs: { backend: "webgl" } })).toEqual(['tfjs.backend: expected "cpu" or "wasm", got "webgl"']);
    expect(issues({ module: "m", tfjs: { backend: "WASM" } })).toEqual(['tfjs.backend: expected "cpu" or "wasm", got "WASM"']);
    expect(issues({ module: "m", tfjs: "wasm" })).toEqual([expect.stringMatching(/^tfjs: expected .*got "wasm"$/)]);
    expect(issues({ module: "m", lastStep: -1, tfjs: { backend: 1, backends: "wasm" } })).toEqual([
      "lastStep: expected an integer >= 0, got -1",
      'tfjs.backends: unknown field "backends" (did you mean "backend"?); tfjs accepts backend',
      'tfjs.backend: expected "cpu" or "wasm", got 1',
    ]);
  });

  it("locates a bad backend in a YAML file by line and column", () => {
    const r = parseConfigText("module: m\ntfjs:\n  backend: gpu\n", "yaml");
    expect(isLeft(r) && r.left.map(formatIssue)).toEqual(['tfjs.backend: expected "cpu" or "wasm", got "gpu" (line 3, column 12)']);
  });
});

describe("decodeConfig: preemption.exitCode", () => {
  const FIX = "pick another code from 3 to 127, such as the default 42";
  const RESERVED = "(0 done, 1 failure, 2 bad usage, 43 chief lost and ≥ 128 a signal are reserved)";

  it("accepts a code from 3 to 127 other than 43", () => {
    for (const exitCode of [3, 42, 44, 50, 127]) expect(decodeConfig({ module: "m.ts", preemption: { exitCode } })).toEqual(right({ module: "m.ts", preemption: { exitCode } }));
  });

  it("refuses a code another outcome uses, in one line naming why and the fix", () => {
    expect(issues({ module: "m.ts", preemption: { exitCode: 43 } })).toEqual([`preemption.exitCode: 43 is the code for a lost chief ${RESERVED}; ${FIX}`]);
    expect(issues({ module: "m.ts", preemption: { exitCode: 0 } })).toEqual([`preemption.exitCode: 0 is the code for done ${RESERVED}; ${FIX}`]);
    expect(issues({ module: "m.ts", preemption: { exitCode: 1 } })).toEqual([`preemption.exitCode: 1 is the code for any other failure ${RESERVED}; ${FIX}`]);
    expect(issues({ module: "m.ts", preemption: { exitCode: 2 } })).toEqual([`preemption.exitCode: 2 is the code for bad usage or configuration ${RESERVED}; ${FIX}`]);
    for (const code of [128, 137, 143, 255]) {
      expect(issues({ module: "m.ts", preemption: { exitCode: code } })).toEqual([`preemption.exitCode: ${code} is the code of a death by a signal (128 + its number) ${RESERVED}; ${FIX}`]);
    }
    for (const bad of [-1, 256, 4.5, "42", null]) expect(issues({ module: "m.ts", preemption: { exitCode: bad } })).toEqual([expect.stringMatching(/^preemption\.exitCode: expected an exit code from 3 to 127, got /)]);
  });

  it("refuses every code of the exit-code table but the preemption's own (they cannot drift apart)", () => {
    for (const [name, code] of Object.entries(ExitCodes)) expect(PreemptionExitCode.is(code), name).toBe(name === "preempted");
  });
});

describe("parseConfigText and loadConfig", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "ms-config-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("readConfig: a file with problems still gives what decoded (hooks keep their index) and places later problems in the file", async () => {
    const file = join(dir, "c.yaml");
    await writeFile(
      file,
      "module: ./job.ts\ncheckpoint: { dir: ckpt, saveSteps: -1 }\nsummaries: { dir: logs }\nhooks:\n  - { type: Nope }\n  - { type: NanTensorHook, lossTensor: Loss }\n",
    );
    const r = await readConfig(file)();
    if (isLeft(r)) throw new Error(r.left.map(formatIssue).join("\n"));
    const { decoded, parts, locate } = r.right;
    expect(isLeft(decoded) && decoded.left.map((i) => i.path)).toEqual(["checkpoint.saveSteps", "hooks[0].type"]);
    // The checkpoint section failed as a whole; the others decoded on their own.
    expect(parts).toEqual({ module: "./job.ts", summaries: { dir: "logs" }, hooks: [undefined, { type: "NanTensorHook", lossTensor: "Loss" }] });
    expect(locate({ path: "hooks[1].lossTensor", message: "m" })).toEqual({ path: "hooks[1].lossTensor", message: "m", line: 6, column: 40 });
    // loadConfig is readConfig that refuses any problem.
    const loaded = await loadConfig(file)();
    expect(isLeft(loaded) && loaded.left).toEqual(isLeft(decoded) && decoded.left);
    // The names of the hooks that decoded are checked, by their index in the file.
    const job = defineJob({ graph: new Graph() });
    expect(checkNames(parts, job, ["train", "loss"]).map((i) => i.path)).toEqual(["hooks[1].lossTensor"]);
  });

  it("locates YAML decode problems and syntax errors by line and column", () => {
    const r = parseConfigText("module: a.ts\ncheckpoint:\n  dir: x\n  saveSecs: -3\n", "yaml");
    expect(isLeft(r) && r.left).toEqual([{ path: "checkpoint.saveSecs", message: "expected a number >= 0 or null, got -3", line: 4, column: 13 }]);
    const s = parseConfigText("module: a.ts\ncheckpoint: [\n", "yaml");
    expect(isLeft(s) && s.left[0]).toMatchObject({ path: "(file)", line: 3, column: 1 });
    expect(isLeft(s) && s.left[0]?.message).toMatch(/^YAML syntax error: /);
  });

  it("locates JSON syntax errors and decode problems by line and column", () => {
    const s = parseConfigText('{\n  "module": "a",\n  "lastStep": }', "json");
    expect(isLeft(s) && s.left[0]).toMatchObject({ path: "(file)", line: 3, column: 15 });
    const d = parseConfigText('{\n  "module": "a",\n  "lastStep": -1\n}', "json");
    expect(isLeft(d) && d.left).toEqual([{ path: "lastStep", message: "expected an integer >= 0, got -1", line: 3, column: 15 }]);
  });

  it("reads YAML and JSON files by extension, and by content otherwise", async () => {
    const yaml = join(dir, "c.yml");
    await writeFile(yaml, "module: ./train.ts\nlastStep: 5\n");
    const json = join(dir, "c.json");
    await writeFile(json, JSON.stringify({ module: "./train.ts", lastStep: 6 }));
    const other = join(dir, "c.conf");
    await writeFile(other, '{ "module": "./train.ts", "lastStep": 7 }');
    for (const [file, step, format] of [[yaml, 5, "yaml"], [json, 6, "json"], [other, 7, "json"]] as const) {
      const r = await loadConfig(file)();
      expect(isRight(r) && r.right).toMatchObject({ config: { lastStep: step }, baseDir: dir, format });
    }
    const missing = await loadConfig(join(dir, "nope.yaml"))();
    expect(isLeft(missing) && missing.left[0]?.message).toMatch(/does not exist/);
  });

  it("decodes hooks with the registry made from the file's plugins (before decoding them)", async () => {
    const file = join(dir, "p.yaml");
    await writeFile(file, "module: ./train.ts\nplugins: [./a.js, ./b.js]\nhooks:\n  - { type: StopAfter, runs: 3 }\n");
    const seen: [readonly string[], string][] = [];
    const r = await loadConfig(file, (plugins, baseDir) => async () => {
      seen.push([plugins, baseDir]);
      return right(
        HookRegistry.withBuiltins().register({
          type: "StopAfter",
          codec: struct("StopAfter", "Stops.", { runs: required(PositiveInt, "Runs.") }),
          create: () => ({}),
        }),
      );
    })();
    expect(seen).toEqual([[["./a.js", "./b.js"], dir]]);
    expect(isRight(r) && r.right.config.hooks).toEqual([{ type: "StopAfter", runs: 3 }]);
    const failed = await loadConfig(file, () => async () => left([{ path: "plugins[1]", message: "broken" }]))();
    expect(isLeft(failed) && failed.left).toEqual([{ path: "plugins[1]", message: "broken" }]);
  });

  it("refuses a YAML alias bomb with one problem, and a checkpoint basename that is not a plain file name", () => {
    const bomb = ["module: a.ts", "a: &a [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 6; i++) bomb.push(`l${i}: &l${i} [${Array(10).fill(i === 1 ? "*a" : `*l${i - 1}`).join(", ")}]`);
    const r = parseConfigText(bomb.join("\n"), "yaml");
    expect(isLeft(r) && r.left.map(formatIssue)).toEqual([
      `(file): YAML aliases expand too much (more than ${MAX_ALIAS_COUNT} alias uses, as in an "alias bomb"): write the values out, or use fewer aliases`,
    ]);
    for (const basename of ["../x", "a/b", "..", "", "a\\b"]) {
      expect(issues({ module: "a.ts", checkpoint: { dir: "c", basename } })).toEqual([
        `checkpoint.basename: expected a plain file name (no /, \\ or .., not empty), got ${JSON.stringify(basename)}`,
      ]);
    }
    expect(isRight(decodeConfig({ module: "a.ts", checkpoint: { dir: "c", basename: "my..ckpt" } }))).toBe(true);
  });

  it("creates nothing on disk for an invalid file", async () => {
    const file = join(dir, "bad.yaml");
    await writeFile(file, "module: ./train.ts\ncheckpoint:\n  dir: ckpt\n  saveSteps: 10\n  saveSecs: 5\n");
    const r = await loadConfig(file)();
    expect(isLeft(r)).toBe(true);
    expect(existsSync(join(dir, "ckpt"))).toBe(false);
  });
});

describe("toMonitoredTrainingSessionOptions", () => {
  const job = defineJob({ graph: new Graph(), lastStep: 9 });
  const decode = (input: unknown) => {
    const r = decodeConfig(input);
    if (isLeft(r)) throw new Error(r.left.map(formatIssue).join("\n"));
    return r.right;
  };

  it("maps the sections to the factory's options and resolves paths against baseDir", () => {
    const o = toMonitoredTrainingSessionOptions(
      decode({ module: "m", checkpoint: { dir: "ckpt", saveSteps: 10 }, summaries: { dir: "/abs/logs", saveSecs: 30 }, logStepCountSteps: 0, stopGracePeriodSecs: 3, maxWaitSecs: 4 }),
      job,
      { baseDir: "/base" },
    );
    expect(o).toMatchObject({
      checkpointDir: "/base/ckpt",
      summaryDir: "/abs/logs",
      saveSummariesSecs: 30,
      logStepCountSteps: 0,
      stopGracePeriodSecs: 3,
      maxWaitSecs: 4,
      isChief: true,
    });
    // the checkpoint hook first (TensorFlow's position), then StopAtStepHook for the job's lastStep
    expect(o.hooks?.map((h) => h.constructor.name)).toEqual(["CheckpointSaverHook", "StopAtStepHook"]);
  });

  it("the step rate: every 10 seconds unless the file says otherwise (logStepCountSteps counts steps, as TensorFlow's factory does)", () => {
    const rate = (extra: object) => {
      const o = toMonitoredTrainingSessionOptions(decode({ module: "m", ...extra }), job);
      return [o.logStepCountSecs, o.logStepCountSteps];
    };
    expect(rate({})).toEqual([10, undefined]);
    expect(rate({ logStepCountSecs: 30 })).toEqual([30, undefined]);
    expect(rate({ logStepCountSecs: null })).toEqual([null, undefined]);
    expect(rate({ logStepCountSteps: 100 })).toEqual([undefined, 100]);
    expect(rate({ logStepCountSteps: 0 })).toEqual([undefined, 0]);
    expect(issues({ module: "m", logStepCountSecs: 5, logStepCountSteps: 100 })).toEqual(["(root): give only one of logStepCountSecs and logStepCountSteps (got logStepCountSecs: 5, logStepCountSteps: 100)"]);
    expect(issues({ module: "m", logStepCountSecs: -1 })).toEqual(["logStepCountSecs: expected a number >= 0 or null, got -1"]);
  });

  it("instantiates configured hooks from the registry, in order, after lastStep's StopAtStepHook", () => {
    const o = toMonitoredTrainingSessionOptions(
      decode({ module: "m", lastStep: 5, hooks: [{ type: "NanTensorHook", lossTensor: "loss" }, { type: "StopAtStepHook", numSteps: 3 }] }),
      job,
    );
    expect(o.hooks?.map((h) => h.constructor.name)).toEqual(["StopAtStepHook", "NanTensorHook", "StopAtStepHook"]);
    expect(o.hooks?.[0]).toBeInstanceOf(StopAtStepHook);
  });

  it("gives a worker no checkpoint hook", () => {
    const o = toMonitoredTrainingSessionOptions(decode({ module: "m", isChief: false, checkpoint: { dir: "c", saveSteps: 1 } }), defineJob({ graph: new Graph() }));
    expect(o.hooks).toEqual([]);
    expect(o.isChief).toBe(false);
  });

  it("a cluster role (from TF_CONFIG) decides isChief and master: a worker gets no checkpoint hook, the chief gets it", () => {
    const config = decode({ module: "m", checkpoint: { dir: "c", saveSteps: 1 } });
    const worker = toMonitoredTrainingSessionOptions(config, defineJob({ graph: new Graph() }), { role: { isChief: false, master: "grpc://127.0.0.1:7002" } });
    expect([worker.isChief, worker.master, worker.hooks]).toEqual([false, "grpc://127.0.0.1:7002", []]);
    const chief = toMonitoredTrainingSessionOptions(config, defineJob({ graph: new Graph() }), { role: { isChief: true, master: "" } });
    expect([chief.isChief, chief.master, chief.hooks?.map((h) => h.constructor.name)]).toEqual([true, "", ["CheckpointSaverHook"]]);
  });

  it("throws ConfigError listing every hook whose factory rejects its options", () => {
    const registry = HookRegistry.withBuiltins().register({
      type: "Picky",
      codec: struct("Picky", "", {}),
      create: () => {
        throw new Error("Picky needs a GPU");
      },
    });
    const config = decodeConfig({ module: "m", hooks: [{ type: "Picky" }, { type: "Picky" }] }, registry);
    if (isLeft(config)) throw new Error("unexpected");
    let error: unknown;
    try {
      toMonitoredTrainingSessionOptions(config.right, job, { registry });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).issues).toEqual<ConfigIssue[]>([
      { path: "hooks[0]", message: "Picky needs a GPU" },
      { path: "hooks[1]", message: "Picky needs a GPU" },
    ]);
  });
});
