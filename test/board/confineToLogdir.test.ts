import { mkdirSync, renameSync, rmSync, statSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { realpathSync } from "node:fs";
import * as E from "fp-ts/lib/Either.js";
import { beforeEach, describe, expect, it } from "vitest";

import { type ConfinedFile, confineFile, confineToLogdir, readConfinedFile } from "../../src/board/confineToLogdir.js";
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

describe("confineFile and readConfinedFile: opened once, without following a link, and only if still the file resolved", () => {
  const TRACE = "{}";
  const SECRET = "outside";
  const confined = async (requested: string): Promise<ConfinedFile> => {
    const r = await confineFile(logdir, requested);
    if (E.isLeft(r)) throw new Error(`${requested} was refused: ${r.left}`);
    return r.right;
  };
  const read = async (file: ConfinedFile, maxBytes = 1 << 20) => {
    const r = await readConfinedFile(file, maxBytes);
    return E.isRight(r) ? { bytes: r.right.toString("utf8") } : { refused: r.left };
  };

  it("reads a regular file inside, also through a link that stays inside; refuses a directory and a link out before opening", async () => {
    const file = await confined("run/plugins/profile/trace.json");
    expect(file.path).toBe(join(logdir, "run", "plugins", "profile", "trace.json"));
    expect(await read(file)).toEqual({ bytes: TRACE });
    expect(await read(await confined("alias/plugins/profile/trace.json"))).toEqual({ bytes: TRACE });
    expect(await confineFile(logdir, "run/plugins")).toEqual(E.left(`${join(logdir, "run", "plugins")}: not a regular file`));
    expect(E.isLeft(await confineFile(logdir, "run/secret-link"))).toBe(true);
  });

  it("a symbolic link put in the file's place after it was resolved is not followed (O_NOFOLLOW): refused, reported", async () => {
    const file = await confined("run/plugins/profile/trace.json");
    symlinkSync(join(root, "secret.txt"), join(logdir, "run", "plugins", "profile", "swap"));
    renameSync(join(logdir, "run", "plugins", "profile", "swap"), file.path); // atomic, as an attacker would
    expect(await read(file)).toEqual({ refused: { notable: true, reason: expect.stringMatching(/changed between resolving and opening it: a symbolic link was put in its place; refused$/) } });
  });

  it("another file put in its place (a link inside, or a rename) has another identity: refused, reported", async () => {
    const file = await confined("run/plugins/profile/trace.json");
    writeFileSync(join(logdir, "run", "plugins", "profile", "other"), SECRET);
    renameSync(join(logdir, "run", "plugins", "profile", "other"), file.path);
    expect(await read(file)).toEqual({ refused: { notable: true, reason: expect.stringMatching(/the file opened is not the one resolved; refused$/) } });
  });

  it("a directory on its path swapped for a link out after it was resolved: refused, reported", async () => {
    writeFileSync(join(root, "elsewhere", "trace.json"), SECRET);
    mkdirSync(join(logdir, "run2"));
    writeFileSync(join(logdir, "run2", "trace.json"), TRACE);
    const file = await confined("run2/trace.json");
    renameSync(join(logdir, "run2"), join(logdir, "run2-aside"));
    symlinkSync(join(root, "elsewhere"), join(logdir, "run2"));
    const r = await read(file);
    expect(r).toEqual({ refused: { notable: true, reason: expect.stringMatching(/changed between resolving and opening it: .*; refused$/) } });
  });

  it.runIf(process.platform === "linux")(
    "on Linux, the kernel's path of the open file must be the one resolved: a swap between resolving and lstat (identity already the other file's) is caught",
    async () => {
      writeFileSync(join(root, "elsewhere", "trace.json"), SECRET);
      mkdirSync(join(logdir, "run2"));
      writeFileSync(join(logdir, "run2", "trace.json"), TRACE);
      const resolved = (await confined("run2/trace.json")).path;
      renameSync(join(logdir, "run2"), join(logdir, "run2-aside"));
      symlinkSync(join(root, "elsewhere"), join(logdir, "run2"));
      // What confineFile returns when the swap lands between its realpath and its lstat.
      const s = statSync(resolved, { bigint: true });
      const r = await read({ path: resolved, dev: s.dev, ino: s.ino });
      expect(r).toEqual({ refused: { notable: true, reason: expect.stringMatching(/the file opened is elsewhere \(a directory on its path was swapped\); refused$/) } });
    },
  );

  it("a file gone since it was resolved is an ordinary miss (not reported); one over maxBytes is refused, reported, and exactly maxBytes is read", async () => {
    const file = await confined("run/plugins/profile/trace.json");
    expect(await read(file, 2)).toEqual({ bytes: TRACE });
    expect(await read(file, 1)).toEqual({ refused: { notable: true, reason: `${file.path} holds more than the 1 bytes served; refused` } });
    unlinkSync(file.path);
    expect(await read(file)).toEqual({ refused: { notable: false, reason: `${file.path}: ENOENT` } });
    rmSync(join(logdir, "run"), { recursive: true });
    expect(E.isLeft(await confineFile(logdir, "run/plugins/profile/trace.json"))).toBe(true);
  });
});
