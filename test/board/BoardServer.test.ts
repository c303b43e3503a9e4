import { mkdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { type Board, boardUrl, isLoopback, onAllInterfaces, requiredToken, startBoard, tokenMatches } from "../../src/board/BoardServer.js";
import { InvalidArgumentError } from "../../src/errors.js";
import { SummaryWriter } from "../../src/summary/SummaryWriter.js";
import { EventRecorder } from "../../src/testing/EventRecorder.js";
import { RecordingLogger } from "../../src/testing/RecordingLogger.js";
import { VirtualClock } from "../../src/testing/VirtualClock.js";
import { useTempDirs } from "../util/tempDirs.js";
import { form, send } from "./http.js";

const tempDir = useTempDirs("board-api-");
let boards: Board[] = [];
afterEach(async () => {
  for (const b of boards.splice(0)) await b.close();
});

/** Starts a board on a free loopback port, driven by a virtual clock, with the logdir read once. */
const serve = async (logdir: string, options: { token?: string; host?: string } = {}): Promise<Board> => {
  const board = await startBoard(logdir, { port: 0, clock: new VirtualClock(), version: "9.9.9", ...options });
  boards.push(board);
  await board.store.loaded;
  return board;
};

/** Writes scalars `tag` at `points` ([step, value]) to a new event file in `dir`, first event at `startMs`. */
const write = async (dir: string, startMs: number, tag: string, points: readonly (readonly [number, number])[]): Promise<string> => {
  const w = new SummaryWriter(dir, { clock: new VirtualClock({ startMs }) });
  for (const [step, value] of points) w.addScalar(tag, value, step);
  await w.close();
  return w.path;
};

let logdir: string;
let base: string;
beforeEach(async () => {
  logdir = tempDir();
  // b_early's first event is older than a_late's: TensorBoard lists it first despite its name.
  await write(join(logdir, "a_late"), 1_700_000_100_500, "loss", [
    [0, 1],
    [1, 0.5],
    [2, 0.25],
  ]);
  await write(join(logdir, "b_early"), 1_700_000_000_250, "loss", [
    [0, 2],
    [1, 0.1],
  ]);
  await write(join(logdir, "b_early"), 1_700_000_000_750, "special", [
    [1, Number.NaN],
    [2, Number.POSITIVE_INFINITY],
    [3, Number.NEGATIVE_INFINITY],
    [4, 3],
  ]);
  // A run with no scalar: in /data/runs, not in the scalar tags.
  const text = new SummaryWriter(join(logdir, "notes"), { clock: new VirtualClock({ startMs: 1_700_000_050_000 }) });
  text.addText("readme", "hello", 0);
  await text.close();
  base = `http://127.0.0.1:${(await serve(logdir)).port}`;
});

describe("TensorBoard's data API (dashboards.md §1), on files of our SummaryWriter", () => {
  it("/data/runs: every run, by first-event time, then name; JSON as Python writes it", async () => {
    const r = await send(`${base}/data/runs`);
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.headers["x-content-type-options"]).toBe("nosniff");
    expect(r.headers["cache-control"]).toBe("no-cache, must-revalidate");
    expect(r.headers["expires"]).toBe("0");
    expect(r.text).toBe('["b_early", "notes", "a_late"]');
  });

  it("/data/environment and /data/plugins_listing", async () => {
    expect(JSON.parse((await send(`${base}/data/environment`)).text)).toEqual({
      version: "9.9.9",
      data_location: logdir,
      window_title: "",
      experiment_name: "",
      experiment_description: "",
      creation_time: 0,
    });
    // Every plugin is listed; one is enabled when some run has its data (here: text in "notes" only).
    const plugin = (name: string, enabled: boolean, element: string): unknown => ({ disable_reload: false, enabled, remove_dom: false, tab_name: name, loading_mechanism: { type: "CUSTOM_ELEMENT", element_name: element } });
    expect(JSON.parse((await send(`${base}/data/plugins_listing`)).text)).toEqual({
      scalars: plugin("scalars", true, "tf-scalar-dashboard"),
      histograms: plugin("histograms", false, "tf-histogram-dashboard"),
      images: plugin("images", false, "tf-image-dashboard"),
      text: plugin("text", true, "tf-text-dashboard"),
    });
  });

  it("/data/plugin/scalars/tags: {run: {tag: {displayName, description}}}, runs without scalars left out", async () => {
    expect(JSON.parse((await send(`${base}/data/plugin/scalars/tags`)).text)).toEqual({
      a_late: { loss: { displayName: "", description: "" } },
      b_early: { loss: { displayName: "", description: "" }, special: { displayName: "", description: "" } },
    });
  });

  it("/data/plugin/scalars/scalars: [[wall_time, step, value], …], every point, floats with a fraction, NaN and ±Infinity as strings", async () => {
    const loss = await send(`${base}/data/plugin/scalars/scalars?run=a_late&tag=loss`);
    expect(loss.headers["content-type"]).toBe("application/json");
    expect(loss.text).toBe("[[1700000100.5, 0, 1.0], [1700000100.5, 1, 0.5], [1700000100.5, 2, 0.25]]");
    const special = await send(`${base}/data/plugin/scalars/scalars?run=b_early&tag=special`);
    expect(special.text).toBe('[[1700000000.75, 1, "NaN"], [1700000000.75, 2, "Infinity"], [1700000000.75, 3, "-Infinity"], [1700000000.75, 4, 3.0]]');
    // A float32 value is served as the double it is, as TensorBoard does.
    expect(JSON.parse((await send(`${base}/data/plugin/scalars/scalars?run=b_early&tag=loss`)).text)).toEqual([
      [1700000000.25, 0, 2],
      [1700000000.25, 1, Math.fround(0.1)],
    ]);
  });

  it("format=csv: header Wall time,Step,Value, CRLF, text/csv, nan/inf", async () => {
    const r = await send(`${base}/data/plugin/scalars/scalars?run=b_early&tag=special&format=csv`);
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("text/csv; charset=utf-8");
    expect(r.text).toBe("Wall time,Step,Value\r\n1700000000.75,1,nan\r\n1700000000.75,2,inf\r\n1700000000.75,3,-inf\r\n1700000000.75,4,3.0\r\n");
  });

  it("POST scalars_multirun: form tag once, runs repeated (url-encoded or multipart); runs without the tag left out", async () => {
    const f = form([
      ["tag", "loss"],
      ["runs", "a_late"],
      ["runs", "notes"],
      ["runs", "nope"],
      ["runs", "b_early"],
    ]);
    const r = await send(`${base}/data/plugin/scalars/scalars_multirun`, { method: "POST", ...f });
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.text).toBe(
      '{"a_late": [[1700000100.5, 0, 1.0], [1700000100.5, 1, 0.5], [1700000100.5, 2, 0.25]], "b_early": [[1700000000.25, 0, 2.0], [1700000000.25, 1, 0.10000000149011612]]}',
    );
    // TensorBoard's own page posts FormData (multipart).
    const body = new FormData();
    body.append("tag", "special");
    body.append("runs", "b_early");
    const multipart = await fetch(`${base}/data/plugin/scalars/scalars_multirun`, { method: "POST", body });
    expect(await multipart.json()).toEqual({ b_early: [[1700000000.75, 1, "NaN"], [1700000000.75, 2, "Infinity"], [1700000000.75, 3, "-Infinity"], [1700000000.75, 4, 3]] });
  });

  it("errors: TensorBoard's codes and texts, as text/plain", async () => {
    const cases: [string, RequestInit & { method?: string }, number, string][] = [
      ["/data/plugin/scalars/scalars?run=a_late", {}, 400, "Invalid argument: Both run and tag must be specified: tag=None, run='a_late'"],
      ["/data/plugin/scalars/scalars?tag=loss", {}, 400, "Invalid argument: Both run and tag must be specified: tag='loss', run=None"],
      ["/data/plugin/scalars/scalars?run=a_late&tag=nope", {}, 404, "Not found: No scalar data for run='a_late', tag='nope'"],
      ["/data/plugin/scalars/scalars?run=it's&tag=loss", {}, 404, `Not found: No scalar data for run="it's", tag='loss'`],
      ["/data/plugin/scalars/scalars_multirun", {}, 405, "Method Not Allowed: The method is not allowed for the requested URL."],
      ["/data/nothing/here", {}, 404, "Not found"],
      ["/favicon.ico", {}, 404, "Not found"],
    ];
    for (const [path, init, status, text] of cases) {
      const r = await send(`${base}${path}`, init.method === undefined ? {} : { method: init.method });
      expect([path, r.status, r.text, r.headers["content-type"]]).toEqual([path, status, text, "text/plain; charset=utf-8"]);
    }
    expect((await send(`${base}/data/plugin/scalars/scalars_multirun`)).headers["allow"]).toBe("POST");
    const twoTags = await send(`${base}/data/plugin/scalars/scalars_multirun`, { method: "POST", ...form([["tag", "a"], ["tag", "b"], ["runs", "a_late"]]) });
    expect([twoTags.status, twoTags.text]).toEqual([400, "Invalid argument: tag must be specified exactly once"]);
    const noTag = await send(`${base}/data/plugin/scalars/scalars_multirun`, { method: "POST", ...form([["runs", "a_late"]]) });
    expect([noTag.status, noTag.text]).toEqual([400, "Invalid argument: tag must be specified exactly once"]);
  });

  it("an /experiment/<id> prefix and a trailing slash route the same; HEAD has headers only; gzip when accepted", async () => {
    expect((await send(`${base}/experiment/anything/data/runs/`)).text).toBe('["b_early", "notes", "a_late"]');
    const head = await send(`${base}/data/runs`, { method: "HEAD" });
    expect([head.status, head.text, head.headers["content-length"]]).toEqual([200, "", String('["b_early", "notes", "a_late"]'.length)]);
    const gz = await send(`${base}/data/plugin/scalars/scalars?run=a_late&tag=loss&format=csv`, { headers: { "Accept-Encoding": "gzip, deflate" } });
    expect(gz.gzipped).toBe(true);
    expect(gz.text.startsWith("Wall time,Step,Value\r\n")).toBe(true);
    // TensorBoard's rule: `gzip;q=0` refuses it.
    expect((await send(`${base}/data/runs`, { headers: { "Accept-Encoding": "gzip;q=0" } })).gzipped).toBe(false);
  });

  it("our resolution=<pixels> decimates (M4) on both scalar routes; min_step/max_step zoom; bad values are 400", async () => {
    const many = join(logdir, "many");
    const points = Array.from({ length: 10_000 }, (_, s) => [s, s === 4321 ? 1000 : Math.sin(s / 100)] as const);
    await write(many, 1_700_000_200_000, "wave", points);
    const b = await serve(logdir);
    const url = `http://127.0.0.1:${b.port}/data/plugin/scalars/scalars?run=many&tag=wave`;
    expect(JSON.parse((await send(url)).text)).toHaveLength(10_000);
    const rows = JSON.parse((await send(`${url}&resolution=100`)).text) as [number, number, number][];
    expect(rows.length).toBeLessThanOrEqual(400);
    expect(rows.length).toBeGreaterThan(100);
    expect(rows[0]?.[1]).toBe(0);
    expect(rows.at(-1)?.[1]).toBe(9999);
    expect(rows.find((r) => r[1] === 4321)?.[2]).toBe(1000); // the spike survives
    const zoom = JSON.parse((await send(`${url}&resolution=10&min_step=4000&max_step=4999`)).text) as [number, number, number][];
    expect(zoom.every((r) => r[1] >= 4000 && r[1] <= 4999)).toBe(true);
    expect(zoom.map((r) => r[1])).toContain(4321);
    expect(zoom.length).toBeLessThanOrEqual(40);
    const cut = JSON.parse((await send(`${url}&min_step=10&max_step=19`)).text) as unknown[];
    expect(cut).toHaveLength(10);
    const csv = (await send(`${url}&resolution=100&format=csv`)).text.split("\r\n");
    expect(csv.length - 2).toBe(rows.length);
    const multi = JSON.parse(
      (await send(`http://127.0.0.1:${b.port}/data/plugin/scalars/scalars_multirun`, { method: "POST", ...form([["tag", "wave"], ["runs", "many"], ["resolution", "100"]]) })).text,
    ) as Record<string, unknown[]>;
    expect(multi["many"]).toEqual(rows);
    for (const bad of ["resolution=0", "resolution=1.5", "resolution=abc", "resolution=100000000", "min_step=x", "min_step=5&max_step=4"]) {
      const r = await send(`${url}&${bad}`);
      expect([bad, r.status, r.text.startsWith("Invalid argument: ")]).toEqual([bad, 400, true]);
    }
    expect((await send(`${url}&resolution=0`)).text).toBe("Invalid argument: resolution: expected an integer from 1 to 65536, got \"0\"");
  });

  it("a request naming a non-loopback host is refused on a loopback board without token (DNS rebinding)", async () => {
    const r = await send(`${base}/data/runs`, { headers: { Host: "evil.example:6006" } });
    expect(r.status).toBe(403);
    expect((await send(`${base}/data/runs`, { headers: { Host: "localhost:6006" } })).status).toBe(200);
  });
});

describe("bad input", () => {
  it("an empty logdir: no runs, no tags, scalars disabled, 404 for a series", async () => {
    const b = await serve(tempDir());
    const at = `http://127.0.0.1:${b.port}`;
    expect((await send(`${at}/data/runs`)).text).toBe("[]");
    expect((await send(`${at}/data/plugin/scalars/tags`)).text).toBe("{}");
    expect(JSON.parse((await send(`${at}/data/plugins_listing`)).text).scalars.enabled).toBe(false);
    expect((await send(`${at}/data/plugin/scalars/scalars?run=.&tag=loss`)).status).toBe(404);
  });

  it("a truncated event file serves its complete records; a non-event file named like one is reported and skipped", async () => {
    const dir = tempDir();
    const path = await write(join(dir, "cut"), 1_700_000_000_000, "loss", [
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    truncateSync(path, readFileSync(path).length - 3);
    mkdirSync(join(dir, "junk"));
    writeFileSync(join(dir, "junk", "events.out.tfevents.1.host"), "not records at all, just text\n");
    const issues: string[] = [];
    const b = await startBoard(dir, { port: 0, clock: new VirtualClock(), onIssue: (m) => issues.push(m) });
    boards.push(b);
    await b.store.loaded;
    const rows = JSON.parse((await send(`http://127.0.0.1:${b.port}/data/plugin/scalars/scalars?run=cut&tag=loss`)).text) as unknown[];
    expect(rows.map((r) => (r as number[])[1])).toEqual([1, 2]);
    expect(issues.join("\n")).toMatch(/not an event file/);
  });

  it("what the board goes on after is a boardIssue event and a warn line on events$, printed by its logger", async () => {
    const dir = tempDir();
    mkdirSync(join(dir, "junk"));
    writeFileSync(join(dir, "junk", "events.out.tfevents.1.host"), "not records at all, just text\n");
    const issues: string[] = [];
    const printed = new RecordingLogger();
    const events = new EventRecorder();
    const b = await startBoard(dir, { port: 0, clock: new VirtualClock(), onIssue: (m) => issues.push(m), logger: printed });
    boards.push(b);
    b.events$.subscribe(events.listener);
    await b.store.loaded;
    const reported = events.ofType("boardIssue");
    expect(reported.map((e) => e.kind)).toEqual(["reader"]);
    expect(reported[0]?.message).toMatch(/not an event file/);
    // The same message three ways: the line on the stream (with its source), the printer, onIssue.
    expect(events.lines("warn").map((e) => [e.source, e.message])).toEqual([["board", reported[0]?.message]]);
    expect(printed.messages("warn")).toEqual([reported[0]?.message]);
    expect(issues).toEqual([reported[0]?.message]);
  });
});

describe("the token rule", () => {
  it("a token is generated off loopback; without it 401; query, Authorization header and the cookie set by the query pass", async () => {
    // Bound to loopback but reached as if remote: the same rule, tested without leaving the machine.
    const b = await serve(logdir, { token: "s3cret" });
    const at = `http://127.0.0.1:${b.port}`;
    expect(b.url).toBe(`${at}/?token=s3cret`);
    const denied = await send(`${at}/data/runs`);
    expect([denied.status, denied.headers["content-type"]]).toEqual([401, "text/plain; charset=utf-8"]);
    expect(denied.text).toMatch(/^Unauthorized: /);
    expect((await send(`${at}/data/runs?token=wrong`)).status).toBe(401);
    expect((await send(`${at}/board/events`)).status).toBe(401);
    const viaQuery = await send(`${at}/data/runs?token=s3cret`);
    expect(viaQuery.status).toBe(200);
    const cookie = String(viaQuery.headers["set-cookie"]).split(";")[0] as string;
    expect(cookie).toBe(`monitored_session_board_${b.port}=s3cret`);
    expect((await send(`${at}/data/runs`, { headers: { Cookie: cookie } })).status).toBe(200);
    expect((await send(`${at}/data/runs`, { headers: { Authorization: "Token s3cret" } })).status).toBe(200);
    expect((await send(`${at}/data/runs`, { headers: { Authorization: "Token nope" } })).status).toBe(401);
  });

  it("a host other than loopback requires a token, generated unless given (tested without binding one)", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"]) expect([h, isLoopback(h)]).toEqual([h, true]);
    for (const h of ["0.0.0.0", "::", "192.168.1.5", "example.com", "10.0.0.1"]) expect([h, isLoopback(h)]).toEqual([h, false]);
    expect(requiredToken("127.0.0.1", undefined)).toBeUndefined();
    expect(requiredToken("127.0.0.1", "mine")).toBe("mine");
    expect(requiredToken("0.0.0.0", "mine")).toBe("mine");
    const a = requiredToken("0.0.0.0", undefined);
    expect(a).toMatch(/^[0-9a-f]{48}$/);
    expect(requiredToken("0.0.0.0", undefined)).not.toBe(a);
  });

  it("an empty or blank token is refused, on any host, before anything is read or bound: anyone could send it", async () => {
    for (const host of ["0.0.0.0", "127.0.0.1"]) {
      for (const token of ["", " ", "\t\n"]) {
        expect(() => requiredToken(host, token)).toThrow(InvalidArgumentError);
        // A logdir that does not exist: the token is refused first, so nothing was looked at.
        await expect(startBoard(join(tempDir(), "nope"), { host, port: 0, token })).rejects.toThrow(InvalidArgumentError);
      }
    }
    expect(() => requiredToken("0.0.0.0", "")).toThrow("the board's token is empty, which anyone could send: give a non-empty token, or none (on loopback none is needed; elsewhere a random one is generated)");
    expect(() => requiredToken("0.0.0.0", "  ")).toThrow(/^the board's token is only whitespace, /);
  });

  it("tokenMatches: the same token matches; an empty or blank one never does, even against itself", () => {
    expect(tokenMatches("s3cret", "s3cret")).toBe(true);
    for (const [token, candidate] of [["s3cret", "s3cret "], ["s3cret", "S3CRET"], ["s3cret", ""], ["", ""], [" ", " "], ["", "s3cret"]] as const) {
      expect([token, candidate, tokenMatches(token, candidate)]).toEqual([token, candidate, false]);
    }
  });

  it("an empty token sent never matches: ?token=, Authorization: Token with nothing, an empty cookie", async () => {
    const b = await serve(logdir, { token: "s3cret" });
    const at = `http://127.0.0.1:${b.port}`;
    const cookie = `monitored_session_board_${b.port}`;
    const attempts: [string, Record<string, string>][] = [
      [`${at}/data/runs?token=`, {}],
      [`${at}/data/runs?token=%20`, {}],
      [`${at}/data/runs`, { Authorization: "Token " }],
      [`${at}/data/runs`, { Authorization: "Token" }],
      [`${at}/data/runs`, { Cookie: `${cookie}=` }],
      [`${at}/data/runs`, { Cookie: `${cookie}=; other=1` }],
    ];
    for (const [url, headers] of attempts) {
      const r = await send(url, { headers });
      expect([url, headers, r.status, r.headers["set-cookie"]]).toEqual([url, headers, 401, undefined]);
    }
  });
});

describe("the URL printed", () => {
  it("on every interface (0.0.0.0, ::, an empty host) names this machine; on loopback or one address, that address", () => {
    for (const host of ["0.0.0.0", "::", "[::]", "0:0:0:0:0:0:0:0", ""]) {
      expect([host, onAllInterfaces(host)]).toEqual([host, true]);
      expect(boardUrl(host, 6006, "t0k")).toBe(`http://${hostname()}:6006/?token=t0k`);
    }
    for (const host of ["127.0.0.1", "::1", "[::1]", "localhost", "192.168.1.5", "fe80::1", "0.0.0.1"]) expect([host, onAllInterfaces(host)]).toEqual([host, false]);
    expect(boardUrl("127.0.0.1", 6006, undefined)).toBe("http://127.0.0.1:6006/");
    expect(boardUrl("localhost", 80, undefined)).toBe("http://localhost:80/");
    expect(boardUrl("::1", 6006, undefined)).toBe("http://[::1]:6006/");
    expect(boardUrl("[::1]", 6006, undefined)).toBe("http://[::1]:6006/");
    expect(boardUrl("192.168.1.5", 6006, "abc")).toBe("http://192.168.1.5:6006/?token=abc");
  });
});
