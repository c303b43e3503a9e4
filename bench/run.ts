/**
 * Benchmark runner: `npm run bench -- <name...>` runs `bench/<name>.bench.ts` and writes its
 * result to `bench/results/<name>.json`. With no name, every benchmark runs.
 *
 * Each benchmark module exports `default async () => Record<string, unknown>`. Benchmarks
 * report medians over repeated runs and ratios against a baseline measured in the same run,
 * because the machine is shared and noisy.
 */
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import os from "node:os";

const here = dirname(fileURLToPath(import.meta.url));

const available = (await readdir(here)).filter((f) => f.endsWith(".bench.ts")).map((f) => f.slice(0, -".bench.ts".length));
const wanted = process.argv.slice(2);
for (const w of wanted) {
  if (!available.includes(w)) {
    console.error(`unknown benchmark "${w}"; available: ${available.join(", ")}`);
    process.exit(2);
  }
}
const names = wanted.length > 0 ? wanted : available;
await mkdir(join(here, "results"), { recursive: true });
for (const name of names) {
  console.log(`# ${name}`);
  const mod = (await import(join(here, `${name}.bench.ts`))) as { default: () => Promise<Record<string, unknown>> };
  const result = await mod.default();
  const out = {
    benchmark: name,
    date: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? "unknown",
    ...result,
  };
  const file = join(here, "results", `${name}.json`);
  await writeFile(file, `${JSON.stringify(out, null, 2)}\n`);
  console.log(JSON.stringify(result, null, 2));
  console.log(`wrote ${file}`);
}
