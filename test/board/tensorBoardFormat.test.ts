import { describe, expect, it } from "vitest";

import { pyJson, pyRepr, scalarRowsCsv, scalarRowsJson } from "../../src/board/tensorBoardFormat.js";

describe("TensorBoard's serialization (http_util.Respond, json_util.Cleanse, csv)", () => {
  it("JSON as Python's json.dumps: ', ' and ': ' separators, ASCII only, non-finite numbers as strings", () => {
    expect(pyJson({ a: [1, "x"], "é": null, t: true, n: Number.NaN, p: Number.POSITIVE_INFINITY, m: Number.NEGATIVE_INFINITY })).toBe(
      '{"a": [1, "x"], "\\u00e9": null, "t": true, "n": "NaN", "p": "Infinity", "m": "-Infinity"}',
    );
    expect(pyJson(["tab\t", "del\u007f", "😀"])).toBe('["tab\\t", "del\\u007f", "\\ud83d\\ude00"]');
    expect(JSON.parse(pyJson({ "run/ünï": "😀" }))).toEqual({ "run/ünï": "😀" });
  });

  it("scalar rows: floats keep a fraction (1.0), steps are integers; CSV has nan/inf and CRLF", () => {
    const series = { steps: [1, 2, 3, 4], wallTimes: [10, 10.5, 1e21, 11], values: [1, Number.NaN, Number.NEGATIVE_INFINITY, 0.25] };
    expect(scalarRowsJson(series)).toBe('[[10.0, 1, 1.0], [10.5, 2, "NaN"], [1e+21, 3, "-Infinity"], [11.0, 4, 0.25]]');
    expect(scalarRowsJson(series, [3, 0])).toBe("[[11.0, 4, 0.25], [10.0, 1, 1.0]]");
    expect(scalarRowsCsv(series)).toBe("Wall time,Step,Value\r\n10.0,1,1.0\r\n10.5,2,nan\r\n1e+21,3,-inf\r\n11.0,4,0.25\r\n");
    expect(scalarRowsCsv({ steps: [], wallTimes: [], values: [] })).toBe("Wall time,Step,Value\r\n");
  });

  it("repr() of a string as Python writes it", () => {
    expect(pyRepr("loss")).toBe("'loss'");
    expect(pyRepr("it's")).toBe(`"it's"`);
    expect(pyRepr(`both ' and "`)).toBe(`'both \\' and "'`);
    expect(pyRepr("a\\b\nc\u0001")).toBe("'a\\\\b\\nc\\x01'");
    expect(pyRepr("ünï")).toBe("'ünï'");
    expect(pyRepr(undefined)).toBe("None");
  });
});
