import { create, toBinary, fromBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ClusterSpec } from "../../src/cluster/ClusterSpec.js";
import { ClusterDefSchema, JobDefSchema } from "../../src/cluster/proto/gen/monitored_session/v1/cluster_pb.js";
import { ValueError } from "../../src/errors.js";

const tasksOf = (spec: ClusterSpec) =>
  spec.asClusterDef().job.map((j) => ({ name: j.name, tasks: { ...j.tasks } }));

describe("ClusterSpec (server_lib_test: ClusterSpecTest)", () => {
  it("dense jobs: a dict of lists gives tasks 0..n-1 and a sorted ClusterDef", () => {
    const spec = new ClusterSpec({ worker: ["w0:2222", "w1:2222", "w2:2222"], ps: ["ps0:2222", "ps1:2222"] });
    expect(spec.jobs).toEqual(["worker", "ps"]);
    expect(spec.numTasks("worker")).toBe(3);
    expect(spec.taskIndices("ps")).toEqual([0, 1]);
    expect(spec.taskAddress("worker", 2)).toBe("w2:2222");
    expect(spec.jobTasks("ps")).toEqual(["ps0:2222", "ps1:2222"]);
    expect(tasksOf(spec)).toEqual([
      { name: "ps", tasks: { 0: "ps0:2222", 1: "ps1:2222" } },
      { name: "worker", tasks: { 0: "w0:2222", 1: "w1:2222", 2: "w2:2222" } },
    ]);
    expect(spec.asDict()).toEqual({ worker: ["w0:2222", "w1:2222", "w2:2222"], ps: ["ps0:2222", "ps1:2222"] });
  });

  it("sparse jobs: an object from index to address; jobTasks has holes, asDict keeps the object", () => {
    const spec = new ClusterSpec({ ps: ["ps0:2222"], worker: { 1: "w1:2222", 3: "w3:2222" } });
    expect(spec.numTasks("worker")).toBe(2);
    expect(spec.taskIndices("worker")).toEqual([1, 3]);
    expect(spec.jobTasks("worker")).toEqual([null, "w1:2222", null, "w3:2222"]);
    expect(spec.jobTasks("worker")).toHaveLength(4);
    expect(spec.asDict()).toEqual({ ps: ["ps0:2222"], worker: { 1: "w1:2222", 3: "w3:2222" } });
    expect(() => spec.taskAddress("worker", 0)).toThrow(new ValueError("No task with index 0 in job 'worker'"));
  });

  it("a sparse job whose indices happen to be 0..n-1 comes back as a list; an empty job as {}", () => {
    const spec = new ClusterSpec({ worker: { 1: "b:1", 0: "a:1" }, empty: {} });
    expect(spec.asDict()).toEqual({ worker: ["a:1", "b:1"], empty: {} });
    expect(spec.jobTasks("empty")).toEqual([]);
    expect(spec.numTasks("empty")).toBe(0);
  });

  it("from a ClusterDef message and from a ClusterDef-shaped plain object", () => {
    const def = create(ClusterDefSchema, {
      job: [create(JobDefSchema, { name: "worker", tasks: { 0: "a:1", 2: "c:1" } }), create(JobDefSchema, { name: "chief", tasks: { 0: "z:1" } })],
    });
    const fromMessage = new ClusterSpec(def);
    expect(fromMessage.jobs).toEqual(["worker", "chief"]);
    expect(fromMessage.jobTasks("worker")).toEqual(["a:1", null, "c:1"]);
    const fromShape = new ClusterSpec({ job: [{ name: "worker", tasks: { 0: "a:1", 2: "c:1" } }, { name: "chief", tasks: { 0: "z:1" } }] });
    expect(fromShape.equals(fromMessage)).toBe(true);
    // A dict whose job is called "job" stays a dict.
    expect(new ClusterSpec({ job: ["a:1"] }).jobs).toEqual(["job"]);
  });

  it("from another ClusterSpec: a copy, jobs sorted as TensorFlow's copy through the ClusterDef", () => {
    const a = new ClusterSpec({ worker: ["w:1"], chief: ["c:1"] });
    const b = new ClusterSpec(a);
    expect(b.jobs).toEqual(["chief", "worker"]);
    expect(b.equals(a)).toBe(true);
    expect(a.equals(b)).toBe(true);
  });

  it("the ClusterDef round-trips through the protobuf binary encoding", () => {
    const spec = new ClusterSpec({ worker: { 5: "w5:1" }, chief: ["c:1"] });
    const back = new ClusterSpec(fromBinary(ClusterDefSchema, toBinary(ClusterDefSchema, spec.asClusterDef())));
    expect(back.equals(spec)).toBe(true);
    expect(back.asDict()).toEqual({ chief: ["c:1"], worker: { 5: "w5:1" } });
  });

  it("is immutable: later changes to the source dict, or to what it returns, change nothing", () => {
    const source = { worker: ["a:1", "b:1"] as string[] };
    const spec = new ClusterSpec(source);
    source.worker.push("c:1");
    source.worker[0] = "x:1";
    (spec.asDict()["worker"] as string[]).push("d:1");
    spec.asClusterDef().job.pop();
    spec.jobs.push("ps");
    expect(spec.asDict()).toEqual({ worker: ["a:1", "b:1"] });
    expect(spec.jobs).toEqual(["worker"]);
    expect(spec.asClusterDef().job).toHaveLength(1);
  });

  it("equality: same jobs and tasks in any job order; TensorFlow's internal-dict comparison for plain objects", () => {
    const a = new ClusterSpec({ ps: ["p:1"], worker: ["w:1"] });
    expect(a.equals(new ClusterSpec({ worker: ["w:1"], ps: ["p:1"] }))).toBe(true);
    expect(a.equals(new ClusterSpec({ worker: ["w:2"], ps: ["p:1"] }))).toBe(false);
    expect(a.equals(new ClusterSpec({ worker: ["w:1"] }))).toBe(false);
    expect(a.equals(new ClusterSpec({ worker: ["w:1"], ps: { 1: "p:1" } }))).toBe(false);
    expect(a.equals({ ps: { 0: "p:1" }, worker: { 0: "w:1" } })).toBe(true);
    expect(a.equals({ ps: ["p:1"], worker: ["w:1"] })).toBe(false);
    expect(a.equals("ClusterSpec")).toBe(false);
  });

  it("isEmpty and toString (TensorFlow's bool and repr)", () => {
    expect(new ClusterSpec({}).isEmpty).toBe(true);
    const spec = new ClusterSpec({ worker: { 1: "w:1" }, ps: ["p:1"] });
    expect(spec.isEmpty).toBe(false);
    expect(spec.toString()).toBe("ClusterSpec({'ps': ['p:1'], 'worker': {1: 'w:1'}})");
  });

  it("unknown job or task: TensorFlow's ValueErrors", () => {
    const spec = new ClusterSpec({ worker: ["w:1"] });
    for (const f of [() => spec.numTasks("ps"), () => spec.taskIndices("ps"), () => spec.taskAddress("ps", 0), () => spec.jobTasks("ps")]) {
      expect(f).toThrow(new ValueError("No such job in cluster: 'ps'"));
    }
    expect(() => spec.taskAddress("worker", 1)).toThrow(ValueError);
    expect(() => spec.taskAddress("worker", 1)).toThrow("No task with index 1 in job 'worker'");
  });

  it("not a dict, ClusterDef or ClusterSpec: TypeError (a list, a string, a number)", () => {
    for (const bad of [["a:1"], "a:1", 42, null]) {
      expect(() => new ClusterSpec(bad as never)).toThrow(TypeError);
      expect(() => new ClusterSpec(bad as never)).toThrow(
        "`cluster` must be a dictionary mapping one or more job names to lists of network addresses, or a `ClusterDef` protocol buffer",
      );
    }
  });

  it("bad tasks or addresses: TypeError with TensorFlow's message; a bad task index: ValueError", () => {
    expect(() => new ClusterSpec({ worker: "a:1" } as never)).toThrow(
      new TypeError("The tasks for job 'worker' must be a list or a dictionary from integers to strings."),
    );
    expect(() => new ClusterSpec({ worker: [1234] } as never)).toThrow(new TypeError("Task address 1234 must be bytes or unicode"));
    expect(() => new ClusterSpec({ worker: { x: "a:1" } } as never)).toThrow(ValueError);
    expect(() => new ClusterSpec({ worker: { "-1": "a:1" } } as never)).toThrow(/Task index '-1' of job 'worker' is not an integer/);
  });
});
