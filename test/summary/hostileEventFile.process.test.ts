/**
 * The file of issue 33, in a real process: a 154-byte event file whose first record header
 * claims 3.5e9 bytes, with a valid length CRC. `readEvents` passed that length to Node's read,
 * which aborted the process (`Assertion failed: args[3]->IsInt32()`, exit 134) past any catch;
 * a claim of 2^62 threw `RangeError: Invalid typed array length` instead. Now the child reads
 * the file, prints the one report, finds the record after the bad header, and exits 0.
 */
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

import { tfFirstRecord } from "../fixtures/summary/tfWritten.js";
import { repoRoot } from "../util/cliChild.js";
import { issue33File } from "../util/hostileRecords.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-hostile-event-file-");

/** 154 bytes: a header claiming `claimed` bytes (its length CRC valid), 102 bytes of filler, then a real record (40 bytes). */
const hostileFile = (claimed: bigint): Buffer => issue33File(claimed, Buffer.concat([Buffer.alloc(102, 0x5a), tfFirstRecord]));

/** What the child runs: every event of the file; issues on stderr, the other events' kinds on stdout. */
const script = (file: string): string => `
import { readEvents } from ${JSON.stringify(pathToFileURL(join(repoRoot, "src/summary/index.ts")).href)};
for await (const e of readEvents(${JSON.stringify(file)})) {
  if (e.kind === "issue") console.error(e.message);
  else console.log(e.kind);
}
`;

const run = (file: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script(file)], { cwd: repoRoot, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, signal: error?.signal ?? null, stdout, stderr });
    });
  });

describe("a hostile event file in a real process (issue 33)", () => {
  it.each([
    ["3.5e9", 3_500_000_000n],
    ["2^62", 2n ** 62n],
  ])("a 154-byte file claiming %s bytes: readEvents exits 0, prints one report line, and reads the record after it", async (_, claimed) => {
    const file = join(tempDir(), "events.out.tfevents.1599759586.hostile");
    const bytes = hostileFile(claimed);
    expect(bytes.length).toBe(154);
    await writeFile(file, bytes);
    const r = await run(file);
    expect({ code: r.code, signal: r.signal }, r.stderr).toEqual({ code: 0, signal: null });
    expect(r.stderr.trimEnd().split("\n")).toEqual([`${file}: corrupted record at offset 0: its header claims ${claimed} bytes, more than the limit of 268435456 (maxRecordBytes); record skipped`]);
    expect(r.stdout.trimEnd().split("\n")).toEqual(["fileVersion"]);
  }, 90_000);
});
