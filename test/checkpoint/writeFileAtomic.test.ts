import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { TempFileRegistry, writeFileAtomic } from "../../src/checkpoint/index.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("ms-atomic-");

describe("writeFileAtomic (monitored-session/checkpoint)", () => {
  it("writes a new file and replaces an existing one, leaving no temporary file and holding no name", async () => {
    const dir = tempDir();
    const path = join(dir, "model.json");
    const temps = new TempFileRegistry();
    await writeFileAtomic(path, "first", temps);
    expect(readFileSync(path, "utf8")).toBe("first");
    writeFileSync(join(dir, "other"), "untouched");
    await writeFileAtomic(path, new Uint8Array([1, 2, 3]), temps);
    expect([...readFileSync(path)]).toEqual([1, 2, 3]);
    expect(readdirSync(dir).sort()).toEqual(["model.json", "other"]);
    expect(temps.size).toBe(0);
  });

  it("a write that cannot finish leaves the old file and no temporary file", async () => {
    const dir = tempDir();
    const path = join(dir, "weights.bin");
    writeFileSync(path, "old");
    // The target is a non-empty directory: the data is staged, then the rename over it fails.
    const blocked = join(dir, "blocked");
    mkdirSync(join(blocked, "child"), { recursive: true });
    const temps = new TempFileRegistry();
    await expect(writeFileAtomic(blocked, "new", temps)).rejects.toThrow();
    expect(readFileSync(path, "utf8")).toBe("old");
    expect(readdirSync(dir).sort()).toEqual(["blocked", "weights.bin"]);
    expect(readdirSync(blocked)).toEqual(["child"]);
    expect(temps.size).toBe(0);
  });
});
