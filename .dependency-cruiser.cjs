/**
 * The layers of monitored-session, checked by `npm run lint` (see "Layers and public API" in
 * docs/architecture.md). Type-only imports count (`tsPreCompilationDeps`).
 *
 *   5  src/cli: the command line, on the runtime's public API; beside it src/kubernetes (the
 *      manifests of `manifest kubernetes`, which name the CLI's exit codes)
 *   4  src/runtime: what a task of a cluster starts (server, coordination, replica group)
 *   3  src/config, src/compat/v1 and src/cluster (beside config)
 *   2  src/preemption, src/tfjs, src/testing, src/training
 *   1  hooks/, and src/board (the server of `monitored-session board`, on the summary reader)
 *   0  the core, in floors (CORE_FLOORS, bottom first): a floor imports only the floors below it
 *      and itself, never one above
 *
 * A layer imports only the layers below it (and its own folder). The `allowed` rules are the
 * whole matrix: an import that none of them allows is an error, so a new folder is placed here
 * before anything in it can import. `src/index.ts` (the package's `.`) is the core plus the
 * training factory.
 */

/** The core's floors, bottom first: [name, the paths on it]. */
const CORE_FLOORS = [
  ["util: leaf helpers that import nothing of src/", "^src/util/"],
  ["errors and the Logger interface", "^src/(?:errors|Logger)\\.ts$"],
  ["time: Clock, ClockScheduler", "^src/time/"],
  ["the session contract: Session, Tensor, Graph, Collective; the codecs (codec.ts)", "^src/(?:session/|codec\\.ts$)"],
  ["coordinator: Coordinator, Looper", "^src/coordinator/"],
  ["events: SessionEvent (the event map each component augments), the log observer", "^src/events/"],
  ["the services: checkpoint, summary and goodput (the goodput log, its recorder, its summaries and its accounting)", "^src/(?:checkpoint|summary|goodput)/"],
  ["creation: SessionManager, Scaffold, the session creators, ResumableState", "^src/creation/"],
  ["the hook API: SessionRunHook, HookEnv, hookEnv", "^src/hook/"],
  ["the pipeline: MonitoredSession and its session layers, SessionTarget, EventLoopYield", "^src/pipeline/"],
];
const CORE = CORE_FLOORS.map(([, path]) => path);
const ROOT_BARREL = "^src/index\\.ts$";
const HOOKS = "^hooks/";
const MIDDLE = "^src/(?:preemption|tfjs|testing|training)/";

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  allowed: [
    {
      comment: "Anything may import npm packages and Node's built-in modules (dev dependencies: see not-to-dev-dependency).",
      from: {},
      to: { dependencyTypes: ["npm", "npm-dev", "npm-peer", "npm-optional", "npm-no-pkg", "npm-unknown", "core"] },
    },
    ...CORE_FLOORS.map(([name, path], i) => ({
      comment: `0.${i} The core's floor "${name}" imports its own floor and the floors below it.`,
      from: { path },
      to: { path: CORE.slice(0, i + 1) },
    })),
    {
      comment: "1. hooks/ imports the core.",
      from: { path: HOOKS },
      to: { path: [...CORE, HOOKS], pathNot: ROOT_BARREL },
    },
    {
      comment: "2. preemption, tfjs, testing and training import the core, hooks/ and their own folder (not each other).",
      from: { path: "^src/(preemption|tfjs|testing|training)/" },
      to: { path: [...CORE, HOOKS, "^src/$1/"], pathNot: ROOT_BARREL },
    },
    {
      comment: "1. board (the server of `monitored-session board`) imports the core and its own folder.",
      from: { path: "^src/board/" },
      to: { path: [...CORE, "^src/board/"], pathNot: ROOT_BARREL },
    },
    {
      comment: "3. cluster (beside config) imports every layer below it and its own folder.",
      from: { path: "^src/cluster/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/cluster/"], pathNot: ROOT_BARREL },
    },
    {
      comment: "3. config imports every layer below it, its own folder, and cluster's `cluster:` section codec (cluster never imports config).",
      from: { path: "^src/config/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/config/", "^src/cluster/ClusterConfig\\.ts$"], pathNot: ROOT_BARREL },
    },
    {
      comment: "4. The runtime (a task of a cluster) imports every layer below it, config and cluster, and its own folder.",
      from: { path: "^src/runtime/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/(?:runtime|config|cluster)/"], pathNot: ROOT_BARREL },
    },
    {
      comment: "5. The CLI imports every layer below it (the runtime through its public index only, besides the exit codes, the tiny launchReady.ts, which the entry point reads before anything loads, the status channel launchStatus.ts, which launch reads and a task writes, and the light modules that run reads without loading the cluster's: clusterTask.ts and replicaGroup.ts; and startTask.ts, whose task object (joinAsTask) run shares with a program's own, loaded with the cluster's modules), and its own folder.",
      from: { path: "^src/cli/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/(?:cli|config|cluster|board|kubernetes)/", "^src/runtime/(?:index|launchReady|launchStatus|chaosOpErrors|exitCodes|clusterTask|replicaGroup|startTask)\\.ts$"], pathNot: ROOT_BARREL },
    },
    {
      comment: "5. kubernetes (the manifests, beside the CLI) imports every layer below it (the runtime through its public index only), the exit codes (runtime/exitCodes.ts), and its own folder.",
      from: { path: "^src/kubernetes/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/(?:kubernetes|config|cluster)/", "^src/runtime/(?:index|exitCodes)\\.ts$"], pathNot: ROOT_BARREL },
    },
    {
      comment: "3. compat/v1 (TensorFlow 1's Supervisor) imports every layer below it and its own folder.",
      from: { path: "^src/compat/v1/" },
      to: { path: [...CORE, HOOKS, MIDDLE, "^src/compat/v1/"], pathNot: ROOT_BARREL },
    },
    {
      comment: "`.` re-exports the core and the training factory; every other area has its own subpath.",
      from: { path: ROOT_BARREL },
      to: { path: [...CORE, "^src/training/"], pathNot: ROOT_BARREL },
    },
  ],
  allowedSeverity: "error",
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "No import cycles, type-only imports included.",
      from: {},
      to: { circular: true },
    },
    {
      name: "hooks-not-core-internals",
      severity: "error",
      comment: "hooks/ builds on the hook API below the pipeline, never on the pipeline (MonitoredSession's layers) or an internal/ folder.",
      from: { path: HOOKS },
      to: { path: ["^src/pipeline/", "^src/[a-z0-9]+/internal/"] },
    },
    {
      name: "hooks-internal-is-private",
      severity: "error",
      comment: "hooks/internal serves hooks/ only.",
      from: { pathNot: HOOKS },
      to: { path: "^hooks/internal/" },
    },
    {
      name: "tfjs-only-in-the-adapter",
      severity: "error",
      comment: "TensorFlow.js is an optional peer: only src/tfjs (and the CLI, which loads it on demand) may import it.",
      from: { path: "^(?:src|hooks)/", pathNot: "^src/(?:tfjs|cli)/" },
      to: { path: "^@tensorflow/|node_modules/@tensorflow/" },
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      comment: "Every import resolves.",
      from: {},
      to: { couldNotResolve: true },
    },
    {
      name: "not-to-dev-dependency",
      severity: "error",
      comment: "Shipped code imports runtime dependencies (or the optional TensorFlow.js peers) only.",
      from: { path: "^(?:src|hooks)/" },
      to: { dependencyTypes: ["npm-dev"], pathNot: "node_modules/@tensorflow/" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      mainFields: ["module", "main", "types", "typings"],
    },
    skipAnalysisNotInRules: true,
  },
};
