import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/util/**", "node_modules/**"],
    // Child-process tests (kill/crash scenarios) spawn real Node processes.
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
