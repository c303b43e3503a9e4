import { isLeft } from "fp-ts/lib/Either.js";
import * as t from "io-ts";
import { describe, expect, it } from "vitest";

import { CheckpointSaverHook } from "../hooks/CheckpointSaverHook.js";
import { NanTensorHook } from "../hooks/NanTensorHook.js";
import { StopAtStepHook } from "../hooks/StopAtStepHook.js";
import { decode, decodeLines, decodeOptions, JsonText, NonNegativeInt, PositiveInt, strictType, Text } from "../src/codec.js";
import { decodeConfig, formatIssue, HookRegistry } from "../src/config/index.js";
import { ValueError } from "../src/errors.js";

describe("codec", () => {
  it("strictType lists every problem with its path, unknown keys with a did-you-mean", () => {
    const codec = strictType({ step: NonNegativeInt, shape: t.array(NonNegativeInt) }, "Entry");
    const r = decodeLines(codec, { step: -1, shape: [1, -2], stpe: 3 });
    expect(isLeft(r) && r.left).toEqual([
      "step: expected an integer >= 0, got -1",
      "shape[1]: expected an integer >= 0, got -2",
      'stpe: unknown field "stpe" (did you mean "step"?); Entry accepts step, shape',
    ]);
    expect(decode(codec, { step: 1, shape: [] })).toEqual({ _tag: "Right", right: { step: 1, shape: [] } });
  });

  it("decodeOptions checks only the codec's fields, and throws ValueError naming the owner and every problem", () => {
    const codec = StopAtStepHook.optionsCodec;
    expect(decodeOptions(codec, { lastStep: 3, clock: {} }, "X")).toEqual({ lastStep: 3 });
    expect(() => decodeOptions(codec, { numSteps: 0 }, "StopAtStepHook")).toThrow(
      new ValueError("StopAtStepHook: numSteps: expected a positive integer, got 0"),
    );
    // A problem of the whole value has no "(root): " in a constructor's message.
    expect(() => decodeOptions(codec, {}, "StopAtStepHook")).toThrow(new ValueError("StopAtStepHook: give one of numSteps and lastStep"));
  });

  it("a hook's constructor and the configuration registry decode with the same codec and report the same problem", () => {
    expect(HookRegistry.builtins.get("StopAtStepHook")?.codec).toBe(StopAtStepHook.optionsCodec);
    const fromFile = decodeConfig({ module: "a.ts", hooks: [{ type: "CheckpointSaverHook", checkpointDir: "c", saveSteps: 0 }] });
    expect(isLeft(fromFile) && fromFile.left.map(formatIssue)).toEqual(["hooks[0].saveSteps: expected a positive integer, got 0"]);
    expect(() => new CheckpointSaverHook({ checkpointDir: "c", saveSteps: 0 })).toThrow("CheckpointSaverHook: saveSteps: expected a positive integer, got 0");
    // The file needs a path where code may pass a manager instead.
    const noDir = decodeConfig({ module: "a.ts", hooks: [{ type: "CheckpointSaverHook", saveSteps: 1 }] });
    expect(isLeft(noDir) && noDir.left.map(formatIssue)).toEqual(["hooks[0].checkpointDir: is required (a non-empty string)"]);
  });

  it("a defaulted field is filled in by decodeOptions (the constructor), shown in the reference, and left absent in a decoded file", () => {
    const codec = NanTensorHook.optionsCodec;
    expect(decodeOptions(codec, { lossTensor: "loss" }, "NanTensorHook")).toEqual({ lossTensor: "loss", failOnNanLoss: true });
    expect(decodeOptions(codec, { lossTensor: "loss", failOnNanLoss: false }, "NanTensorHook")).toEqual({ lossTensor: "loss", failOnNanLoss: false });
    expect(codec.fields.failOnNanLoss.defaultValue).toBe("true");
    const fromFile = decodeConfig({ module: "a.ts", hooks: [{ type: "NanTensorHook", lossTensor: "loss" }] });
    expect(isLeft(fromFile) ? fromFile.left : fromFile.right.hooks).toEqual([{ type: "NanTensorHook", lossTensor: "loss" }]);
  });

  it("extend and require derive a struct without changing the original", () => {
    const base = StopAtStepHook.optionsCodec;
    const derived = base.extend({ note: { codec: PositiveInt, optional: true, doc: "n" } }).require("lastStep");
    expect(Object.keys(derived.fields)).toEqual(["numSteps", "lastStep", "note"]);
    expect(derived.fields.lastStep.optional).toBe(false);
    expect(base.fields.lastStep.optional).toBe(true);
  });

  it("JsonText piped into a codec decodes a JSON message in one step, each problem with its path", () => {
    const Message = JsonText.pipe(t.type({ name: Text, shape: t.array(NonNegativeInt) }), "a message");
    expect(decodeLines(Message, '{"name":"w","shape":[2,3],"extra":1}')).toEqual({ _tag: "Right", right: { name: "w", shape: [2, 3], extra: 1 } });
    expect(decodeLines(Message, '{"name":7,"shape":[2,-3]}')).toEqual({ _tag: "Left", left: ["name: expected a string, got 7", "shape[1]: expected an integer >= 0, got -3"] });
    expect(decodeLines(Message, "{oops")).toEqual({ _tag: "Left", left: ['(root): expected JSON, got "{oops"'] });
    expect(decodeLines(Message, 42)).toEqual({ _tag: "Left", left: ["(root): expected JSON text, got 42"] });
  });
});
