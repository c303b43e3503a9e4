/**
 * How TensorBoard's Python server writes what it serves, so that scripts written against it read
 * ours the same: JSON as `json.dumps` writes it (`", "` and `": "` separators, ASCII only,
 * `NaN`/`Infinity`/`-Infinity` as strings as `json_util.Cleanse` makes them, floats with a
 * fraction: `1.0`), scalar CSV as Python's `csv` module writes it (CRLF, `nan`, `inf`), and
 * `repr()` of a string, which its error messages quote.
 *
 * Numbers are written in JavaScript's shortest round-trip form, as Python's `repr` chooses them;
 * only the exponent style can differ (`1e-7` here, `1e-07` in Python), which parses to the same
 * number.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The columns of a scalar series (a `ScalarSeries` has them). */
export interface ScalarColumns {
  readonly steps: ArrayLike<number>;
  readonly wallTimes: ArrayLike<number>;
  readonly values: ArrayLike<number>;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** `value` as TensorBoard's `http_util.Respond` serializes a JSON body (plain data only). */
export const pyJson = (value: unknown): string => {
  if (value === null || value === undefined) return "null";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : nonFiniteJson(value);
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "string") return jsonString(value);
  if (Array.isArray(value)) return `[${value.map(pyJson).join(", ")}]`;
  return `{${Object.entries(value as Record<string, unknown>)
    .map(([k, v]) => `${jsonString(k)}: ${pyJson(v)}`)
    .join(", ")}}`;
};

/** The points of a series (all, or those at `indices`) as `[[wall_time, step, value], …]`. */
export const scalarRowsJson = (series: ScalarColumns, indices?: ArrayLike<number>): string => {
  const rows: string[] = [];
  forEachRow(series, indices, (w, s, v) => rows.push(`[${pyFloat(w)}, ${s}, ${Number.isFinite(v) ? pyFloat(v) : nonFiniteJson(v)}]`));
  return `[${rows.join(", ")}]`;
};

/** The points of a series as TensorBoard's `format=csv`: header `Wall time,Step,Value`, CRLF line ends. */
export const scalarRowsCsv = (series: ScalarColumns, indices?: ArrayLike<number>): string => {
  const lines = ["Wall time,Step,Value"];
  forEachRow(series, indices, (w, s, v) => lines.push(`${csvFloat(w)},${s},${csvFloat(v)}`));
  return `${lines.join("\r\n")}\r\n`;
};

/** A float as TensorBoard's JSON writes it: `1.0`, `0.5`, `"NaN"`, `"Infinity"`. */
export const pyFloatJson = (x: number): string => (Number.isFinite(x) ? pyFloat(x) : nonFiniteJson(x));

/** Python's `repr()` of a string (`'a'`, `"it's"`), or `None`. */
export const pyRepr = (s: string | undefined): string => {
  if (s === undefined) return "None";
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const code = ch.codePointAt(0) as number;
    if (ch === "\\" || ch === quote) out += `\\${ch}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + quote;
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const forEachRow = (series: ScalarColumns, indices: ArrayLike<number> | undefined, row: (wallTime: number, step: number, value: number) => void): void => {
  const { steps, wallTimes, values } = series;
  const n = indices === undefined ? steps.length : indices.length;
  for (let k = 0; k < n; k++) {
    const i = indices === undefined ? k : (indices[k] as number);
    row(wallTimes[i] as number, steps[i] as number, values[i] as number);
  }
};

/** A finite float as Python's `repr` writes it: a whole number keeps `.0`. */
const pyFloat = (x: number): string => {
  const s = String(x);
  return Number.isInteger(x) && !s.includes("e") ? `${s}.0` : s;
};

const nonFiniteJson = (x: number): string => (Number.isNaN(x) ? '"NaN"' : x > 0 ? '"Infinity"' : '"-Infinity"');

const csvFloat = (x: number): string => (Number.isNaN(x) ? "nan" : x === Number.POSITIVE_INFINITY ? "inf" : x === Number.NEGATIVE_INFINITY ? "-inf" : pyFloat(x));

/** A JSON string with every character outside printable ASCII escaped, as `ensure_ascii` does. */
const jsonString = (s: string): string =>
  JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${(c.charCodeAt(0)).toString(16).padStart(4, "0")}`);
