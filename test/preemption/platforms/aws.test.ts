/** The AWS spot watcher (IMDSv2) against a fake instance metadata service on loopback. */

import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { ValueError } from "../../../src/errors.js";
import { awsWatcher, type PlatformWatcher } from "../../../src/preemption/index.js";
import { VirtualClock } from "../../../src/testing/VirtualClock.js";
import { startFakeMetadataServer, type FakeMetadataServer, type FakeRoute } from "./fakeMetadataServer.js";

let server: FakeMetadataServer;
let clock: VirtualClock;
beforeEach(async () => {
  server = await startFakeMetadataServer();
  clock = new VirtualClock({ startMs: 0 });
});
afterEach(() => server.close());

/** An IMDSv2 service: tokens `t1`, `t2`… ; `valid` says which are accepted; `action` is the spot item. */
const imds = (state: { action?: string; valid: (token: string) => boolean }): FakeRoute => {
  let n = 0;
  return (r) => {
    if (r.method === "PUT" && r.url === "/latest/api/token") {
      if (r.headers["x-aws-ec2-metadata-token-ttl-seconds"] === undefined) return { status: 400 };
      return { status: 200, body: `t${++n}` };
    }
    if (r.method === "GET" && r.url === "/latest/meta-data/spot/instance-action") {
      const token = r.headers["x-aws-ec2-metadata-token"];
      if (typeof token !== "string" || !state.valid(token)) return { status: 401 };
      return state.action === undefined ? { status: 404, body: "Not Found" } : { status: 200, body: state.action };
    }
    return undefined;
  };
};

const check = (w: PlatformWatcher) => (w.check as NonNullable<PlatformWatcher["check"]>)(new AbortController().signal);
const calls = () => server.requests.map((r) => `${r.method} ${r.url} ${String(r.headers["x-aws-ec2-metadata-token"] ?? "")}`.trim());

describe("awsWatcher", () => {
  it("404 is no notice; the token is fetched once and reused", async () => {
    server.route(imds({ valid: () => true }));
    const w = awsWatcher({ baseUrl: server.baseUrl, clock });
    expect(await check(w)).toBeUndefined();
    expect(await check(w)).toBeUndefined();
    expect(calls()).toEqual([
      "PUT /latest/api/token",
      "GET /latest/meta-data/spot/instance-action t1",
      "GET /latest/meta-data/spot/instance-action t1",
    ]);
  });

  it("the instance-action notice has the action's time as its deadline", async () => {
    server.route(imds({ valid: () => true, action: '{"action": "terminate", "time": "2026-11-22T21:02:00Z"}' }));
    const n = await check(awsWatcher({ baseUrl: server.baseUrl, clock }));
    expect(n).toEqual({ platform: "aws", detail: 'spot instance-action "terminate" at 2026-11-22T21:02:00Z', deadlineMs: Date.parse("2026-11-22T21:02:00Z") });
  });

  it("a token the service rejects (expired) is replaced and the read retried once", async () => {
    let valid = new Set(["t1"]);
    server.route(imds({ valid: (t) => valid.has(t) }));
    const w = awsWatcher({ baseUrl: server.baseUrl, clock });
    expect(await check(w)).toBeUndefined();
    valid = new Set(["t2"]); // t1 expired on the service's side
    expect(await check(w)).toBeUndefined();
    expect(calls().slice(2)).toEqual(["GET /latest/meta-data/spot/instance-action t1", "PUT /latest/api/token", "GET /latest/meta-data/spot/instance-action t2"]);
  });

  it("the token is renewed before its TTL runs out on the clock", async () => {
    server.route(imds({ valid: () => true }));
    const w = awsWatcher({ baseUrl: server.baseUrl, clock, tokenTtlSecs: 60 });
    await check(w);
    expect(server.requests.at(0)?.headers["x-aws-ec2-metadata-token-ttl-seconds"]).toBe("60");
    await clock.advance(50_000);
    await check(w);
    expect(calls().filter((c) => c.startsWith("PUT"))).toHaveLength(1);
    await clock.advance(5_000); // within the renewal margin of the 60 s TTL
    await check(w);
    expect(calls().slice(-2)).toEqual(["PUT /latest/api/token", "GET /latest/meta-data/spot/instance-action t2"]);
  });

  it("a malformed notice, a failed token request and a second 401 reject", async () => {
    server.route(imds({ valid: () => true, action: '{"action": "reboot", "time": "soon"}' }));
    await expect(check(awsWatcher({ baseUrl: server.baseUrl, clock }))).rejects.toThrow(
      'malformed answer from spot/instance-action (action: expected "terminate", "stop" or "hibernate", got "reboot"; time: expected an ISO 8601 time, got "soon"): ',
    );
    server.route(imds({ valid: () => true, action: '{"time": "2026-01-01T00:00:00Z"}' }));
    await expect(check(awsWatcher({ baseUrl: server.baseUrl, clock }))).rejects.toThrow(/\(action: expected "terminate", "stop" or "hibernate", got nothing\)/);
    server.route(imds({ valid: () => true, action: "not json" }));
    await expect(check(awsWatcher({ baseUrl: server.baseUrl, clock }))).rejects.toThrow(/\(\(root\): expected JSON, got "not json"\)/);
    server.route(() => ({ status: 403 }));
    await expect(check(awsWatcher({ baseUrl: server.baseUrl, clock }))).rejects.toThrow(/IMDSv2 token request answered HTTP 403/);
    server.route(imds({ valid: () => false }));
    await expect(check(awsWatcher({ baseUrl: server.baseUrl, clock }))).rejects.toThrow(/answered HTTP 401/);
  });

  it("rejects a TTL outside IMDSv2's range", () => {
    expect(() => awsWatcher({ tokenTtlSecs: 0 })).toThrow(ValueError);
    expect(() => awsWatcher({ tokenTtlSecs: 21601 })).toThrow(/1 to 21600/);
  });
});
