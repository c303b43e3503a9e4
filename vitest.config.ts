import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    setupFiles: ["test/setup/networkGuard.ts"],
    // The JSON report feeds the `N passed, N failed` summary of .ci/run; it covers both projects.
    reporters: ["default", "json"],
    outputFile: { json: ".vitest-report.json" },
    // Child-process tests (kill and crash scenarios) spawn real Node processes.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Two files at a time even on 2 cores (vitest's default there is one): most of the suite's
    // time is real child processes that wait on each other, and no test may depend on timing,
    // so a loaded machine (.ci/stress) must pass too.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // `vitest run` (the README's `npm cit`) runs both; `--project unit` or `--project integration` one.
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/**/*.test.ts"],
          // A unit test uses no real process (test/setup/processGuard.ts) and no real time (a
          // VirtualClock, or a wait on an event). Tests that start processes are named
          // *.process.test.ts; tests that depend on wall-clock time (worker threads, sockets with
          // deadlines, real heartbeats) are named *.realtime.test.ts. Both run in the integration project.
          exclude: [
            "test/integration/**",
            "test/**/*.process.test.ts",
            "test/**/*.realtime.test.ts",
            "test/util/**",
            "test/fixtures/**",
            "node_modules/**",
          ],
          // Added to the root's setupFiles (networkGuard.ts): projects that extend the root concatenate them.
          setupFiles: ["test/setup/processGuard.ts"],
        },
      },
      {
        // Real processes killed and crashed at seeded random moments (TEST_SEED replays a run),
        // and the tests that depend on wall-clock time (*.realtime.test.ts).
        extends: true,
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts", "test/**/*.process.test.ts", "test/**/*.realtime.test.ts"],
        },
      },
    ],
  },
});
