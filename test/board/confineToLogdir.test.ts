import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { realpathSync } from "node:fs";
import { beforeEach, describe, expect, it } from "vitest";

import { confineToLogdir } from "../../src/board/confineToLogdir.js";
import { useTempDirs } from "../util/tempDirs.js";

const tempDir = useTempDirs("board-confine-");
let root: string;
let logdir: string;
beforeEach(() => {
  root = realpathSync(tempDir());
  logdir = join(root, "logs");
  mkdirSync(join(logdir, "run", "plugins", "profile"), { recursive: true });
  writeFileSync(join(logdir, "run", "plugins", "profile", "trace.json"), "{}");
  writeFileSync(join(root, "secret.txt"), "outside");
  mkdirSync(join(root, "elsewhere"));
  writeFileSync(join(root, "elsewhere", "image.png"), "outside");
  symlinkSync(join(root, "elsewhere"), join(logdir, "escape")); // a link out of the logdir
  symlinkSync(join(root, "secret.txt"), join(logdir, "run", "secret-link"));
  symlinkSync(join(logdir, "run"), join(logdir, "alias")); // a link that stays inside
});

const refused = async (requested: string): Promise<string> => {
  const r = await confineToLogdir(logdir, requested);
  if (r._tag === "Right") throw new Error(`${requested} was allowed: ${r.right}`);
  return r.left;
};

describe("confineToLogdir: no path served outside the logdir", () => {
  it("resolves a path inside the logdir, also through a link that stays inside", async () => {
    const inside = join(logdir, "run", "plugins", "profile", "trace.json");
    expect(await confineToLogdir(logdir, "run/plugins/profile/trace.json")).toEqual({ _tag: "Right", right: inside });
    expect(await confineToLogdir(logdir, "run%2Fplugins%2Fprofile%2Ftrace.json")).toEqual({ _tag: "Right", right: inside });
    expect(await confineToLogdir(logdir, "alias/plugins/profile/trace.json")).toEqual({ _tag: "Right", right: inside });
    // A ".." inside a name is not a segment.
    writeFileSync(join(logdir, "run", "a..b"), "x");
    expect((await confineToLogdir(logdir, "run/a..b"))._tag).toBe("Right");
  });

  it("refuses .. however it is written", async () => {
    for (const p of ["..", "../secret.txt", "run/../../secret.txt", "%2e%2e/secret.txt", "%2E%2E%2Fsecret.txt", "run/%2e%2e/%2e%2e/secret.txt", "..%5Csecret.txt", "run\\..\\..\\secret.txt"]) {
      expect(await refused(p)).toMatch(/".." segment/);
    }
  });

  it("refuses absolute paths, encoded or not, and drive or UNC paths", async () => {
    for (const p of [join(root, "secret.txt"), "/etc/passwd", "%2Fetc%2Fpasswd", "C:\\Windows\\win.ini", "c:/x", "\\\\server\\share\\x", ""]) {
      expect(await refused(p)).toMatch(/not a relative path/);
    }
  });

  it("refuses a symlink that resolves outside, a NUL byte, a bad encoding and a missing file", async () => {
    expect(await refused("escape/image.png")).toMatch(/outside the logdir/);
    expect(await refused("run/secret-link")).toMatch(/outside the logdir/);
    expect(await refused("run/x%00.png")).toMatch(/NUL/);
    expect(await refused("run/%E0%A4%A")).toMatch(/percent-encoded/);
    expect(await refused("run/nope.png")).toMatch(/ENOENT/);
  });
});
