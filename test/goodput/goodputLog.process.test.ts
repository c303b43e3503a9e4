/**
 * The goodput reader and a FIFO in a log's place (made with `mkfifo`, a process, hence this
 * file): refused at once with a one-line ValueError, never waited on for a writer that never
 * comes (`monitored-session goodput` would hang).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { readGoodputLogs } from "../../src/index.js";
import { ValueError } from "../../src/errors.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-goodput-fifo-");

describe.skipIf(process.platform === "win32")("the goodput reader and a FIFO", () => {
  it("a FIFO in a log's place is refused at once, naming it", () => {
    const dir = tempDir();
    mkdirSync(join(dir, "goodput"));
    execFileSync("mkfifo", [join(dir, "goodput", "worker-0.jsonl")]);
    expect(() => readGoodputLogs(dir)).toThrow(ValueError);
    expect(() => readGoodputLogs(dir)).toThrow(/worker-0\.jsonl is not a regular file; remove it/);
  });
});
