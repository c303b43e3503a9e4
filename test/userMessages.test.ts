/**
 * Every line a user can see is asserted by some test: each `info`, `warn` or `error` call in
 * src/ and hooks/ whose first argument is a string or template literal must have a piece of its
 * fixed text (three words in a row, or the whole of a shorter message's longest piece) in a test
 * file. A new message without a test fails here, naming its file and line.
 *
 * The few lines no test can provoke deterministically are listed below with the reason.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");

/** `file: the message's first fixed words` → why no test provokes it. */
const UNTESTABLE: Readonly<Record<string, string>> = {
  "src/cli/runTraining.ts: The cluster's shutdown barrier failed":
    "the barrier fails only when the coordination service dies between the last step and the barrier; the runtime's own barrier failure is tested in test/runtime (finish's result)",
  "src/cli/runBoard.ts: board: an unexpected message from its process:": "a guard against a board process of another version on the IPC channel; our board process sends only the messages it declares",
  "src/cluster/Server.ts: : server error:": "the HTTP/2 server (node:http2, through @connectrpc/connect-node) reports an error after a successful bind only for an OS fault on accept (EMFILE), which a test cannot cause",
  "src/cluster/collective/TcpCollective.ts: collective: : listener error:": "a listening socket's 'error' after it listens is an OS fault (EMFILE on accept) a test cannot cause without exhausting the process's descriptors",
};

const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === "node_modules" ? [] : sourceFiles(path);
    return e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [path] : [];
  });

/** A logger call whose first argument is a literal: `.info("…")`, `.warn(\`…\`)`, `.error(…)`. */
const CALL = /\.(info|warn|error)\(\s*([`"])/g;

/**
 * The literal that starts at `text[start]` (its quote): its fixed pieces between substitutions,
 * at the top level only (a template inside a substitution is part of the substitution).
 */
const piecesOfLiteral = (text: string, start: number): string[] => {
  const quote = text[start];
  const pieces: string[] = [];
  let piece = "";
  for (let i = start + 1; i < text.length; i++) {
    const c = text[i] as string;
    if (c === "\\") {
      piece += text.slice(i, i + 2);
      i++;
    } else if (c === quote) {
      return [...pieces, piece];
    } else if (quote === "`" && c === "$" && text[i + 1] === "{") {
      pieces.push(piece);
      piece = "";
      i = endOfSubstitution(text, i + 2);
    } else piece += c;
  }
  return [...pieces, piece];
};

/** The index of the `}` that closes a substitution whose body starts at `from` (skipping strings and nested templates). */
const endOfSubstitution = (text: string, from: number): number => {
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (c === "{") depth++;
    else if (c === "}") {
      if (depth === 0) return i;
      depth--;
    } else if (c === '"' || c === "'" || c === "`") {
      // Skip the string (a template's own substitutions included).
      for (i++; i < text.length && text[i] !== c; i++) {
        if (text[i] === "\\") i++;
        else if (c === "`" && text[i] === "$" && text[i + 1] === "{") i = endOfSubstitution(text, i + 2);
      }
    }
  }
  return text.length;
};

interface Message {
  readonly where: string;
  /** The fixed pieces of its text, between substitutions. */
  readonly pieces: readonly string[];
}

const messagesOf = (file: string): Message[] => {
  const text = readFileSync(file, "utf8");
  const found: Message[] = [];
  for (const m of text.matchAll(CALL)) {
    const quoteAt = m.index + m[0].length - 1;
    const pieces = piecesOfLiteral(text, quoteAt).filter((p) => p.trim().length >= 8);
    if (pieces.length === 0) continue;
    const line = text.slice(0, m.index).split("\n").length;
    found.push({ where: `${relative(root, file)}:${line}`, pieces });
  }
  return found;
};

const wordsOf = (piece: string): string[] => piece.trim().split(/\s+/);

/**
 * Whether the tests assert the message: three words in a row of one of its pieces occur in a test
 * (a window of 10 characters or more); a message with no such window needs its longest piece
 * there.
 */
const asserted = (message: Message, tests: string): boolean => {
  const windows = message.pieces.flatMap((piece) => {
    const words = wordsOf(piece);
    return words.slice(0, Math.max(0, words.length - 2)).map((_, i) => words.slice(i, i + 3).join(" "));
  });
  const telling = windows.filter((w) => w.length >= 10);
  if (telling.length > 0) return telling.some((w) => tests.includes(w));
  const longest = [...message.pieces].sort((x, y) => y.trim().length - x.trim().length)[0] as string;
  return tests.includes(longest.trim());
};

const untestableKey = (message: Message): string => `${message.where.replace(/:\d+$/, "")}: ${message.pieces.join(" ").replace(/\s+/g, " ").trim()}`;

describe("user-visible messages", () => {
  const sources = [...sourceFiles(join(root, "src")), ...sourceFiles(join(root, "hooks"))];
  const tests = sourceFiles(join(root, "test"))
    .filter((f) => !f.endsWith("userMessages.test.ts"))
    .map((f) => readFileSync(f, "utf8"))
    .join("\n");
  const messages = sources.flatMap(messagesOf);

  it("the scan finds the logger calls (a broken pattern would pass vacuously)", () => {
    expect(messages.length).toBeGreaterThan(100);
    expect(messages.some((m) => m.where.startsWith("src/cli/runTraining.ts:") && m.pieces.some((p) => p.startsWith("Starting at global step")))).toBe(true);
  });

  it("every info, warning and error line in src/ and hooks/ is asserted by some test (or listed, with why, as one no test can provoke)", () => {
    const listed = Object.keys(UNTESTABLE);
    const missing = messages.filter((m) => !asserted(m, tests) && !listed.some((key) => untestableKey(m).startsWith(key)));
    expect(missing.map((m) => `${m.where}: ${m.pieces.join(" … ")}`)).toEqual([]);
  });

  it("every line listed as untestable still exists and is still untested (the list shrinks as tests come)", () => {
    for (const key of Object.keys(UNTESTABLE)) {
      const matching = messages.filter((m) => untestableKey(m).startsWith(key));
      expect(matching.length, key).toBeGreaterThan(0);
      for (const m of matching) expect(asserted(m, tests), `${m.where} is tested now: drop it from UNTESTABLE`).toBe(false);
    }
  });
});
