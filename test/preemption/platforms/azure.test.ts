/** The Azure Scheduled Events watcher against a fake instance metadata service on loopback. */

import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { azureWatcher, type PlatformWatcher } from "../../../src/preemption/index.js";
import { startFakeMetadataServer, type FakeMetadataServer } from "./fakeMetadataServer.js";

const EVENTS = "/metadata/scheduledevents?api-version=2020-07-01";
const NAME = "/metadata/instance/compute/name?api-version=2021-02-01&format=text";

let server: FakeMetadataServer;
beforeEach(async () => {
  server = await startFakeMetadataServer();
});
afterEach(() => server.close());

const doc = (events: object[]) => JSON.stringify({ DocumentIncarnation: 3, Events: events });
const event = (o: object) => ({
  EventId: "602d9444-d2cd-49c7-8624-8643e7171297",
  EventType: "Preempt",
  ResourceType: "VirtualMachine",
  Resources: ["vm-a"],
  EventStatus: "Scheduled",
  NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT",
  Description: "",
  EventSource: "Platform",
  DurationInSeconds: -1,
  ...o,
});
const signal = () => new AbortController().signal;
const check = (w: PlatformWatcher) => (w.check as NonNullable<PlatformWatcher["check"]>)(signal());
const serve = (events: object[] | string, name = "vm-a") =>
  server.route((r) => (r.url === EVENTS && r.method === "GET" ? { status: 200, body: typeof events === "string" ? events : doc(events) } : r.url === NAME ? { status: 200, body: name } : undefined));

describe("azureWatcher", () => {
  it("no events, or events that do not end the VM, are no notice; sends Metadata: true", async () => {
    serve([]);
    const w = azureWatcher({ baseUrl: server.baseUrl });
    expect(await check(w)).toBeUndefined();
    serve([event({ EventType: "Freeze" }), event({ EventType: "Reboot" })]);
    expect(await check(w)).toBeUndefined();
    expect(server.requests.every((r) => r.headers["metadata"] === "true")).toBe(true);
  });

  it("a Preempt event for this VM (name asked once) is a notice with NotBefore as the deadline", async () => {
    serve([event({})]);
    const w = azureWatcher({ baseUrl: server.baseUrl });
    const n = await check(w);
    expect(n).toMatchObject({ platform: "azure", eventId: "602d9444-d2cd-49c7-8624-8643e7171297", deadlineMs: Date.parse("Mon, 19 Sep 2016 18:29:47 GMT") });
    await check(w);
    expect(server.requests.filter((r) => r.url === NAME)).toHaveLength(1);
  });

  it("another VM's Terminate is not ours; an event naming no resources is; a Started event has no deadline", async () => {
    serve([event({ EventType: "Terminate", Resources: ["vm-b"] })]);
    expect(await check(azureWatcher({ baseUrl: server.baseUrl }))).toBeUndefined();
    serve([event({ EventType: "Terminate", Resources: [], EventStatus: "Started", NotBefore: "" })]);
    expect(await check(azureWatcher({ baseUrl: server.baseUrl, vmName: "vm-x" }))).toMatchObject({ platform: "azure", deadlineMs: undefined });
  });

  it("acknowledges the event with StartRequests once asked", async () => {
    serve([event({})]);
    const w = azureWatcher({ baseUrl: server.baseUrl, vmName: "vm-a" });
    const n = await check(w);
    server.route((r) => (r.method === "POST" ? { status: 200 } : undefined));
    await w.acknowledge?.(n as NonNullable<typeof n>, signal());
    const post = server.requests.find((r) => r.method === "POST");
    expect(post?.url).toBe(EVENTS);
    expect(JSON.parse(post?.body ?? "")).toEqual({ StartRequests: [{ EventId: "602d9444-d2cd-49c7-8624-8643e7171297" }] });
    server.route(() => ({ status: 400 }));
    await expect(w.acknowledge?.(n as NonNullable<typeof n>, signal())).rejects.toThrow(/StartRequests answered HTTP 400/);
  });

  it("a malformed document rejects, naming each problem's path", async () => {
    serve("{\"DocumentIncarnation\": 1}");
    await expect(check(azureWatcher({ baseUrl: server.baseUrl }))).rejects.toThrow(/^malformed answer from Azure Scheduled Events \(Events: expected an array of scheduled events, got nothing\): /);
    serve([{ EventType: "Preempt" }, event({ Resources: ["vm-a", 7], NotBefore: 3 })]);
    await expect(check(azureWatcher({ baseUrl: server.baseUrl }))).rejects.toThrow(
      "(Events[0].EventId: expected a string, got nothing; Events[1].Resources: expected an array of strings or null, got [\"vm-a\",7]; Events[1].NotBefore: expected a string, got 3)",
    );
    serve("[oops");
    await expect(check(azureWatcher({ baseUrl: server.baseUrl }))).rejects.toThrow(/\(\(root\): expected JSON, got "\[oops"\)/);
  });

  it("an event without Resources is the whole scale set's, and one without NotBefore has no deadline", async () => {
    const { Resources: _r, NotBefore: _n, ...bare } = event({});
    serve([bare]);
    const n = await check(azureWatcher({ baseUrl: server.baseUrl }));
    expect(n).toMatchObject({ platform: "azure", deadlineMs: undefined, detail: "Scheduled Event Preempt 602d9444-d2cd-49c7-8624-8643e7171297" });
    serve([event({ Resources: null })]);
    expect(await check(azureWatcher({ baseUrl: server.baseUrl }))).toMatchObject({ platform: "azure" });
  });
});
