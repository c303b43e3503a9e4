import { describe, expect, it } from "vitest";
import {
  coordinationBackend,
  defaultCoordinationTimeouts,
  EtcdCoordinationClient,
  newIncarnation,
  resolveCoordinationTimeouts,
  taskName,
} from "../../../src/cluster/coordination/index.js";
import {
  decodeFailureHeader,
  decodeFailureJson,
  decodeStatusJson,
  encodeFailureHeader,
  fromStatus,
  reportedStatus,
  toStatus,
} from "../../../src/cluster/coordination/status.js";
import {
  AbortedError,
  AlreadyExistsError,
  CancelledError,
  type ClusterFailure,
  clusterFailureOf,
  DataLossError,
  DeadlineExceededError,
  ErrorCode,
  InvalidArgumentError,
  OpError,
  ResourceExhaustedError,
  UnavailableError,
} from "../../../src/errors.js";
import { chief, tasks } from "./conformance.js";

describe("coordination timeouts", () => {
  it("defaults to TensorFlow's heartbeat (10 s timeout, 5 s interval), shutdown (10 s) and registration (1 h) values", () => {
    expect(resolveCoordinationTimeouts()).toEqual(defaultCoordinationTimeouts);
    expect(defaultCoordinationTimeouts).toMatchObject({
      heartbeatTimeoutMs: 10_000,
      heartbeatIntervalMs: 5_000,
      registrationTimeoutMs: 3_600_000,
      shutdownTimeoutMs: 10_000,
    });
  });

  it("the interval follows a configured timeout unless given", () => {
    expect(resolveCoordinationTimeouts({ heartbeatTimeoutMs: 4_000 }).heartbeatIntervalMs).toBe(2_000);
    expect(resolveCoordinationTimeouts({ heartbeatTimeoutMs: 4_000, heartbeatIntervalMs: 500 }).heartbeatIntervalMs).toBe(500);
  });

  it("bad values are one clear error naming the setting", () => {
    expect(() => resolveCoordinationTimeouts({ barrierTimeoutMs: -1 })).toThrow(/barrierTimeoutMs: expected a positive number/);
    expect(() => resolveCoordinationTimeouts({ heartbeatIntervalMs: 10_000 })).toThrow(/heartbeatIntervalMs .* must be less than heartbeatTimeoutMs/);
  });

  it("etcd: a heartbeat timeout under 2 s is an InvalidArgumentError, at construction", () => {
    expect(() => resolveCoordinationTimeouts({ heartbeatTimeoutMs: 1_500 }, coordinationBackend("etcd"))).toThrow(InvalidArgumentError);
    expect(() => resolveCoordinationTimeouts({ heartbeatTimeoutMs: 1_500 }, coordinationBackend("etcd"))).toThrow(/minimum of 2000 ms \(etcd leases are whole seconds\)/);
    expect(resolveCoordinationTimeouts({ heartbeatTimeoutMs: 1_500 }, coordinationBackend("embedded")).heartbeatTimeoutMs).toBe(1_500);
    expect(resolveCoordinationTimeouts({ heartbeatTimeoutMs: 1_500 }, coordinationBackend("memory")).heartbeatTimeoutMs).toBe(1_500);
    // From JavaScript, a name would skip the floor without a word: refused.
    expect(() => resolveCoordinationTimeouts({ heartbeatTimeoutMs: 1_500 }, "etcd" as never)).toThrow(
      'resolveCoordinationTimeouts: pass the backend\'s registration (coordinationBackend("etcd")), not its name',
    );
    expect(
      () =>
        new EtcdCoordinationClient({
          task: chief,
          tasks,
          isChief: true,
          hosts: ["http://127.0.0.1:1"],
          timeouts: { heartbeatTimeoutMs: 1_000 },
        }),
    ).toThrow(/set it to 2000 or more/);
  });
});

describe("coordination status mapping", () => {
  it("round-trips the project's error classes by code", () => {
    for (const e of [new UnavailableError("a"), new AbortedError("b"), new DeadlineExceededError("c"), new AlreadyExistsError("d")]) {
      const back = fromStatus(toStatus(e));
      expect(back).toBeInstanceOf(e.constructor);
      expect(back.message).toBe(e.message);
    }
  });

  it("a status stored by another task is decoded; a malformed one is DataLossError naming where it is", () => {
    expect(decodeStatusJson('{"code":14,"message":"gone"}', "etcd key k")).toEqual({ code: 14, message: "gone" });
    expect(() => decodeStatusJson("{", "etcd key k")).toThrow(DataLossError);
    expect(() => decodeStatusJson('{"code":"x","message":1}', "etcd key k")).toThrow(/etcd key k: code: .*message/);
  });

  it("a cluster failure travels as data: through a status, its JSON and its gRPC header, each kind intact", () => {
    const failures: ClusterFailure[] = [
      { kind: "declaredFailed", tasks: [chief, "/job:worker/replica:0/task:1"] },
      { kind: "reported", reporter: chief, errorName: "ResourceExhaustedError" },
      { kind: "preemption", reporter: chief, notice: "SIGTERM" },
      { kind: "peerLost", task: chief },
      { kind: "serviceGone", backend: "etcd" },
    ];
    for (const failure of failures) {
      const e = new UnavailableError("x", { failure });
      expect(fromStatus(toStatus(e)).failure).toEqual(failure);
      expect(fromStatus(decodeStatusJson(JSON.stringify(toStatus(e)), "k")).failure).toEqual(failure);
      expect(decodeFailureHeader(encodeFailureHeader(failure), "h")).toEqual(failure);
    }
    // Without a failure, a status stays as it was.
    expect(toStatus(new UnavailableError("y"))).toEqual({ code: ErrorCode.UNAVAILABLE, message: "y" });
    // A wrapped error still says what its cause is.
    expect(clusterFailureOf(new Error("outer", { cause: new UnavailableError("z", { failure: failures[3] }) }))).toEqual(failures[3]);
  });

  it("a malformed failure from another process is DataLossError (or the caller's InvalidArgumentError) naming each problem", () => {
    expect(() => decodeStatusJson('{"code":14,"message":"m","failure":{"kind":"declaredFailed","tasks":"x"}}', "etcd key k")).toThrow(DataLossError);
    expect(() => decodeStatusJson('{"code":14,"message":"m","failure":{"kind":"eaten"}}', "etcd key k")).toThrow(
      'etcd key k: failure: expected a cluster failure ({kind: declaredFailed|reported|preemption|peerLost|serviceGone, ...}) or nothing, got {"kind":"eaten"}',
    );
    expect(() => decodeFailureHeader("not base64 json", "the header")).toThrow(DataLossError);
    expect(() => decodeFailureJson('{"kind":"serviceGone","backend":"no such backend"}', (p) => new InvalidArgumentError(p))).toThrow(InvalidArgumentError);
    expect(decodeFailureJson("", (p) => new InvalidArgumentError(p))).toBeUndefined();
  });

  it("a reported status names its reporter in words and in data; a preemption stays one; a relayed loss stays itself", () => {
    const reported = reportedStatus(toStatus(new ResourceExhaustedError("out of memory")), chief);
    expect(fromStatus(reported)).toBeInstanceOf(ResourceExhaustedError);
    expect(reported.message).toBe(`out of memory (reported by task ${chief})`);
    expect(reported.failure).toEqual({ kind: "reported", reporter: chief, errorName: "ResourceExhaustedError" });
    const notice = reportedStatus(toStatus(new CancelledError("n", { failure: { kind: "preemption", reporter: "someone", notice: "SIGTERM" } })), chief);
    expect(notice.failure).toEqual({ kind: "preemption", reporter: chief, notice: "SIGTERM" });
    const relayed = reportedStatus(toStatus(new UnavailableError("w left", { failure: { kind: "peerLost", task: "w" } })), chief);
    expect(relayed.failure).toEqual({ kind: "peerLost", task: "w" });
  });

  it("a code without a class stays an OpError with its code; a plain Error is UNKNOWN", () => {
    const back = fromStatus({ code: ErrorCode.PERMISSION_DENIED, message: "no" });
    expect(back).toBeInstanceOf(OpError);
    expect(back.code).toBe(ErrorCode.PERMISSION_DENIED);
    expect(toStatus(new Error("x"))).toEqual({ code: ErrorCode.UNKNOWN, message: "x" });
  });
});

describe("identity", () => {
  it("an incarnation is a random 64-bit id; task names are TensorFlow's", () => {
    const a = newIncarnation();
    expect(a).toMatch(/^\d+$/);
    expect(BigInt(a) < 2n ** 64n).toBe(true);
    expect(newIncarnation()).not.toBe(a);
    expect(taskName("worker", 2)).toBe("/job:worker/replica:0/task:2");
  });
});
