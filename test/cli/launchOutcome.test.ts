/**
 * `launch`'s exit code from its tasks' exits (groupOutcome), and the status channel's lines
 * (launchStatus.ts): the precedence the exit-code table states, and hostile lines refused.
 */
import { describe, expect, it } from "vitest";

import { groupOutcome } from "../../src/cli/launch.js";
import { DataLossError } from "../../src/errors.js";
import { decodeLaunchStatus, launchStatusWriter, launchTaskName } from "../../src/runtime/launchStatus.js";

describe("launch's exit code (the precedence of the exit-code table)", () => {
  it("the code of the task whose notice started the preemption (42 or 43) comes first", () => {
    const exits = [
      { task: "chief:0", code: 1 },
      { task: "worker:1", code: 43 },
      { task: "worker:0", code: 42 },
    ];
    expect(groupOutcome(exits, "worker:0", 42)).toEqual({ code: 42, decidedBy: "worker:0", noticeFrom: "worker:0" });
    expect(groupOutcome(exits, "worker:1", 42)).toEqual({ code: 43, decidedBy: "worker:1", noticeFrom: "worker:1" });
  });

  it("then 43 (a chief lost during a preemption), before the first failure", () => {
    const exits = [
      { task: "worker:0", code: 1 },
      { task: "worker:1", code: 43 },
    ];
    expect(groupOutcome(exits, undefined, 42).code).toBe(43);
    // The noticed task failed otherwise: its 1 is not a preemption, 43 still wins.
    expect(groupOutcome(exits, "worker:0", 42)).toEqual({ code: 43, decidedBy: "worker:1", noticeFrom: "worker:0" });
  });

  it("then the first failure (a frozen task launch SIGKILLed as lost: its 137); 0 when all exited 0", () => {
    expect(groupOutcome([{ task: "worker:0", code: 137 }, { task: "chief:0", code: 1 }], undefined, 42)).toEqual({ code: 137, decidedBy: "worker:0" });
    expect(groupOutcome([{ task: "chief:0", code: 1 }, { task: "worker:0", code: 42 }], undefined, 42)).toEqual({ code: 1, decidedBy: "chief:0" });
    expect(groupOutcome([{ task: "chief:0", code: 0 }, { task: "worker:0", code: 0 }], undefined, 42)).toEqual({ code: 0 });
  });

  it("what launch caused does not decide: a 43 of a task it stopped, a 137 of a task it killed as lost (while another failed)", () => {
    const actions = { killedAsLost: new Set(["worker:0"]), signalled: new Set(["worker:1"]) };
    const exits = [
      { task: "worker:0", code: 137 },
      { task: "chief:0", code: 1 },
      { task: "worker:1", code: 43 },
    ];
    expect(groupOutcome(exits, undefined, 42, actions)).toEqual({ code: 1, decidedBy: "chief:0" });
    expect(groupOutcome([{ task: "worker:0", code: 137 }], undefined, 42, actions)).toEqual({ code: 137, decidedBy: "worker:0" });
  });

  it("a task launch killed as lost decides over one that only answered launch's SIGTERM (a 42 that is no preemption of its own)", () => {
    const actions = { killedAsLost: new Set(["chief:0"]), signalled: new Set(["worker:0", "worker:1"]) };
    const exits = [
      { task: "worker:0", code: 42 },
      { task: "chief:0", code: 137 },
      { task: "worker:1", code: 42 },
    ];
    expect(groupOutcome(exits, undefined, 42, actions)).toEqual({ code: 137, decidedBy: "chief:0" });
    // A task launch signalled that failed on its own (1, not the answer to a SIGTERM) still decides.
    expect(groupOutcome([{ task: "chief:0", code: 137 }, { task: "worker:0", code: 1 }], undefined, 42, { killedAsLost: new Set(["chief:0"]), signalled: new Set(["worker:0"]) })).toEqual({ code: 1, decidedBy: "worker:0" });
  });

  it("a custom preemption code counts as the preemption", () => {
    expect(groupOutcome([{ task: "worker:0", code: 1 }, { task: "chief:0", code: 50 }], "chief:0", 50).code).toBe(50);
    expect(groupOutcome([{ task: "worker:0", code: 1 }, { task: "chief:0", code: 42 }], "chief:0", 50).code).toBe(1);
  });
});

describe("the status channel", () => {
  it("decodes each kind of line; anything else is DataLossError naming the task and the problem", () => {
    expect(decodeLaunchStatus('{"type":"notice","source":"SIGTERM"}', "worker:1")).toEqual({ type: "notice", source: "SIGTERM" });
    expect(decodeLaunchStatus('{"type":"lost","tasks":["/job:chief/replica:0/task:0"],"why":"serviceGone"}', "worker:1")).toEqual({
      type: "lost",
      tasks: ["/job:chief/replica:0/task:0"],
      why: "serviceGone",
    });
    expect(decodeLaunchStatus('{"type":"exiting","code":43,"reason":"chief lost"}', "w")).toEqual({ type: "exiting", code: 43, reason: "chief lost" });
    expect(decodeLaunchStatus('{"type":"chaos","fault":3}', "w")).toEqual({ type: "chaos", fault: 3 });
    expect(decodeLaunchStatus('{"type":"training"}', "w")).toEqual({ type: "training" });
    expect(decodeLaunchStatus('{"type":"rejoins"}', "w")).toEqual({ type: "rejoins" });
    for (const bad of ["", "{", "[]", '{"type":"chaos","fault":-1}', '{"type":"chaos","fault":1.5}', '{"type":"notice"}', '{"type":"lost","tasks":[1],"why":"declaredFailed"}', '{"type":"exiting","code":300,"reason":""}', '{"type":"reboot"}']) {
      expect(() => decodeLaunchStatus(bad, "worker:1"), bad).toThrow(DataLossError);
    }
    expect(() => decodeLaunchStatus('{"type":"reboot"}', "worker:1")).toThrow(/^worker:1's status channel: /);
  });

  it("task names become launch's; a task without a channel (or a bad descriptor) writes nothing and goes on", () => {
    expect(launchTaskName("/job:worker/replica:0/task:12")).toBe("worker:12");
    expect(launchTaskName("/job:chief/replica:0/task:0")).toBe("chief:0");
    expect(launchTaskName("odd")).toBe("odd");
    expect(() => launchStatusWriter({})({ type: "notice", source: "SIGTERM" })).not.toThrow();
    expect(() => launchStatusWriter({ MONITORED_SESSION_LAUNCH_STATUS_FD: "987654" })({ type: "notice", source: "SIGTERM" })).not.toThrow();
    expect(() => launchStatusWriter({ MONITORED_SESSION_LAUNCH_STATUS_FD: "x" })({ type: "notice", source: "SIGTERM" })).not.toThrow();
  });
});
