/**
 * The names an entry point of the package exports, and the committed lists they are held to
 * (test/fixtures/exports/): read by test/package.exports.test.ts on the sources and by
 * test/integration/package-consumer.test.ts on the packed package's dist/.
 *
 * TypeScript gives every name, type-only ones included; a name is a value when the symbol it
 * finally resolves to is a value and no `export type` / `type` specifier on the way made it
 * type-only. The run-time namespace of the module must hold exactly the value names.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import ts from "typescript";

export interface ExportNames {
  /** Names that exist at run time (classes, functions, constants, enums, codecs). */
  readonly values: readonly string[];
  /** Names that exist only for the type checker. */
  readonly types: readonly string[];
}

/** The environment variable that rewrites the committed lists instead of comparing with them. */
export const UPDATE_ENV = "UPDATE_EXPORTS";

/** The directory of the committed lists. */
export const LISTS_DIR = join(import.meta.dirname, "..", "fixtures", "exports");

const byName = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** `true` when an alias declaration is `export type { X }`, `export { type X }` or the import equivalents. */
const isTypeOnlyAlias = (decl: ts.Declaration | undefined): boolean => decl !== undefined && ts.isTypeOnlyImportOrExportDeclaration(decl);

/** Whether `symbol`, followed through its re-exports, is a value at run time. */
const isValue = (checker: ts.TypeChecker, symbol: ts.Symbol): boolean => {
  let s = symbol;
  for (let hops = 0; s.flags & ts.SymbolFlags.Alias; hops++) {
    if (hops > 100 || (s.declarations ?? []).some(isTypeOnlyAlias)) return false;
    s = checker.getImmediateAliasedSymbol(s) ?? s;
    if (s === symbol) return false;
  }
  return (s.flags & ts.SymbolFlags.Value) !== 0;
};

/**
 * The names each of `files` (entry points: .ts sources or .d.ts declarations) exports, as
 * TypeScript resolves them with `options`.
 */
export const declaredExports = (files: readonly string[], options: ts.CompilerOptions): Map<string, ExportNames> => {
  const program = ts.createProgram(files, { ...options, noEmit: true });
  const checker = program.getTypeChecker();
  const out = new Map<string, ExportNames>();
  for (const file of files) {
    const source = program.getSourceFile(file);
    const module = source === undefined ? undefined : checker.getSymbolAtLocation(source);
    if (module === undefined) throw new Error(`TypeScript found no module at ${file}`);
    const values: string[] = [];
    const types: string[] = [];
    for (const symbol of checker.getExportsOfModule(module)) (isValue(checker, symbol) ? values : types).push(symbol.name);
    out.set(file, { values: values.sort(byName), types: types.sort(byName) });
  }
  return out;
};

/** The compiler options of the repository's tsconfig.json. */
export const repositoryCompilerOptions = (root: string): ts.CompilerOptions => {
  const parsed = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    },
  });
  if (parsed === undefined) throw new Error(`cannot read ${join(root, "tsconfig.json")}`);
  return parsed.options;
};

/** The file of a subpath's list: `.` → root.txt, `./compat/v1` → compat-v1.txt. */
export const listFile = (subpath: string): string => join(LISTS_DIR, `${subpath === "." ? "root" : subpath.replace(/^\.\//, "").replaceAll("/", "-")}.txt`);

/** The package name plus the subpath, as a user imports it. */
const importName = (subpath: string): string => `monitored-session${subpath === "." ? "" : subpath.slice(1)}`;

/** A list as committed: a header, the values, then the type-only names (`type X`), one a line. */
export const formatList = (subpath: string, names: ExportNames): string =>
  [
    `# The public names of ${importName(subpath)}, checked by test/package.exports.test.ts and the packed-package test.`,
    `# Rewrite deliberately with: ${UPDATE_ENV}=1 npx vitest run test/package.exports.test.ts`,
    ...names.values,
    ...names.types.map((n) => `type ${n}`),
  ].join("\n") + "\n";

/** A committed list, as {@link formatList} wrote it. */
export const parseList = (text: string): ExportNames => {
  const lines = text.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
  return {
    values: lines.filter((l) => !l.startsWith("type ")),
    types: lines.filter((l) => l.startsWith("type ")).map((l) => l.slice("type ".length)),
  };
};

/**
 * Compares a subpath's names with its committed list. Returns `undefined` when they match (or
 * when `UPDATE_EXPORTS=1` rewrote the list), else a message that names every added and
 * removed name and says how to accept the change.
 */
export const checkList = (subpath: string, names: ExportNames, where: string): string | undefined => {
  const file = listFile(subpath);
  if (process.env[UPDATE_ENV] === "1") {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, formatList(subpath, names));
    return undefined;
  }
  const committed: ExportNames = existsSync(file) ? parseList(readFileSync(file, "utf8")) : { values: [], types: [] };
  const label = (kind: "values" | "types", n: string): string => (kind === "types" ? `type ${n}` : n);
  const diff = (from: ExportNames, to: ExportNames): string[] =>
    (["values", "types"] as const).flatMap((kind) => to[kind].filter((n) => !from[kind].includes(n)).map((n) => label(kind, n)));
  const added = diff(committed, names);
  const removed = diff(names, committed);
  if (added.length === 0 && removed.length === 0) return undefined;
  return [
    `${importName(subpath)} (${where}) no longer exports what ${file.slice(file.indexOf("test/fixtures/"))} lists.`,
    ...(added.length > 0 ? [`  public now, not in the list: ${added.join(", ")}`] : []),
    ...(removed.length > 0 ? [`  in the list, not exported: ${removed.join(", ")}`] : []),
    `If the change is deliberate, rewrite the lists with \`${UPDATE_ENV}=1 npx vitest run test/package.exports.test.ts\`, commit test/fixtures/exports/ and note the change in CHANGELOG.md; otherwise fix the entry point.`,
  ].join("\n");
};
