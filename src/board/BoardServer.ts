/**
 * `startBoard`: the server of `monitored-session board <logdir>`. Node's own `http` module (the
 * board has a handful of routes and one stream; a framework would add a dependency and nothing
 * the routes need). It serves:
 *
 * - TensorBoard's HTTP data API ({@link answerData}) from a {@link BoardStore} that follows the
 *   logdir;
 * - `/board/events`, the live push ({@link LiveEvents});
 * - `/board/checkpoints` (in {@link answerData}) and `/board/timelines`, the profiler timelines
 *   ({@link answerTimelines}; the list kept, walked again when runs change or once it is
 *   `timelinesMaxAgeSecs` old), served only through `confineToLogdir`'s gate (each file opened
 *   once, without following a link, and checked to be the file resolved and a timeline);
 * - `/board/goodput`, each run's goodput from its goodput logs ({@link answerGoodput}, through the
 *   same gate);
 * - `/`, the board's page, and its assets ({@link pageAsset}; with a Content-Security-Policy), and
 *   `/board/series`, what the page draws of a series ({@link answerPageSeries}).
 *
 * It is read-only. It binds loopback (`127.0.0.1`) unless told otherwise. On any other address a
 * token is required, as Jupyter does: generated when not given, printed in the URL. A request
 * carries it as the query parameter `token=…`, the header `Authorization: Token …`, or the
 * cookie the server sets when the query parameter was right (so the page's own requests need
 * nothing). Without it: 401. An empty (or blank) token is refused when given, and an empty one
 * sent never matches. On loopback without a token, requests must name a loopback host
 * (`Host: localhost:6006`, `127.0.0.1`, `[::1]`), which stops a web page from reaching the
 * board through a DNS name rebound to 127.0.0.1. On every interface (`0.0.0.0`, `::`), the URL
 * names the machine by its host name.
 *
 * @module
 */

import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { isIP, type AddressInfo } from "node:net";
import { hostname } from "node:os";

import type { Observable } from "rxjs";

import { ComponentEvents } from "../events/componentEvents.js";
import { silentLogger, type Logger } from "../Logger.js";
import { type Clock, systemClock } from "../time/Clock.js";
import { InvalidArgumentError, NotFoundError } from "../errors.js";
import { BoardStore } from "./BoardStore.js";
import { answerData, type BoardEnvironment, routePath } from "./dataApi.js";
import { LiveEvents } from "./liveEvents.js";
import { pageAsset } from "./pageAssets.js";
import { answerChartSeries, answerPageSeries } from "./pageSeries.js";
import { HttpError, respond, respondError } from "./respond.js";
import { answerTimelines, TimelineList } from "./timelines.js";
import { answerGoodput, GoodputView } from "./goodputApi.js";
import type { BoardEvent, BoardIssueKind } from "./events.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Options of {@link startBoard}. */
export interface BoardOptions {
  /** Address to bind (default `127.0.0.1`). Any non-loopback address requires a token. */
  readonly host?: string;
  /** Port (default 6006, TensorBoard's; 0 picks a free one). */
  readonly port?: number;
  /** The token requests must carry: not empty nor only whitespace (`InvalidArgumentError`). Default: none on loopback, a random one elsewhere. */
  readonly token?: string;
  /** Seconds between polls of the logdir (default 0.5). */
  readonly pollSecs?: number;
  /** Seconds the profiler timelines list is kept before a request walks the logdir again (default 2); a run that appears or goes renews it at once. */
  readonly timelinesMaxAgeSecs?: number;
  /** Time for polls, throttles and heartbeats (tests pass a `VirtualClock`). */
  readonly clock?: Clock;
  /** Image bytes kept per (run, tag) before older steps are thinned out (default 32 MiB). */
  readonly imageBytesPerTag?: number;
  /** Histogram bytes kept per (run, tag) before older steps are thinned out (default 16 MiB). */
  readonly histogramBytesPerTag?: number;
  /** Text bytes kept per (run, tag) before older steps are thinned out (default 4 MiB). */
  readonly textBytesPerTag?: number;
  /** What `/data/environment` reports as `version`. */
  readonly version?: string;
  /**
   * Called with what the reader reports (bad checksums, non-event files...), images, histograms
   * and text thinned out, and unexpected route errors: each also a `boardIssue` event and a
   * `warn` line on {@link Board.events$}.
   */
  readonly onIssue?: (message: string) => void;
  /**
   * Prints the board's lines while no session adopts its {@link Board.events$} (default: none;
   * `monitored-session board` prints them on stderr).
   */
  readonly logger?: Logger;
}

/** A running board. */
export interface Board {
  /** The URL to open, with `?token=…` when a token is required; on every interface (`0.0.0.0`, `::`), with this machine's host name. */
  readonly url: string;
  /** The port bound (the real one when 0 was asked). */
  readonly port: number;
  /** The token, when one is required. */
  readonly token: string | undefined;
  readonly store: BoardStore;
  /**
   * What the board says: a `boardIssue` for each problem it went on after (see
   * `BoardOptions.onIssue`), beside the same message as a `warn` line (`source: "board"`).
   * Completes on {@link close}.
   */
  readonly events$: Observable<BoardEvent>;
  /** A session prints the board's lines from now on (`session.forwardEvents(board)`); call the result to hand them back. */
  adopt(): () => void;
  /** Stops serving (open event streams are ended) and stops reading. */
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/**
 * Starts a board on `logdir` and resolves once it listens. Rejects with `InvalidArgumentError`
 * if `token` is empty or only whitespace, with `NotFoundError` if `logdir` does not exist, and
 * with Node's listen error (`code` `EADDRINUSE`, `EACCES`, `EADDRNOTAVAIL`, or
 * `ERR_SOCKET_BAD_PORT` for a port outside 0 to 65535) if the address cannot be bound; nothing is
 * left running then.
 */
export const startBoard = async (logdir: string, options: BoardOptions = {}): Promise<Board> => {
  const host = options.host ?? "127.0.0.1";
  const token = requiredToken(host, options.token);
  await stat(logdir).catch((e: NodeJS.ErrnoException) => {
    throw e.code === "ENOENT" ? new NotFoundError(`${logdir}: no such file or directory`) : e;
  });
  const clock = options.clock ?? systemClock;
  const events = new ComponentEvents<BoardEvent>(options.logger ?? silentLogger, () => clock.now(), "board");
  const report = (kind: BoardIssueKind, message: string): void => {
    events.logger.warn(message);
    events.emit({ type: "boardIssue", time: clock.now(), kind, message });
    options.onIssue?.(message);
  };
  const server = createServer();
  const port = await listen(server, host, options.port ?? 6006);
  const store = new BoardStore(logdir, {
    clock,
    ...(options.pollSecs === undefined ? {} : { pollSecs: options.pollSecs }),
    ...(options.imageBytesPerTag === undefined ? {} : { imageBytesPerTag: options.imageBytesPerTag }),
    ...(options.histogramBytesPerTag === undefined ? {} : { histogramBytesPerTag: options.histogramBytesPerTag }),
    ...(options.textBytesPerTag === undefined ? {} : { textBytesPerTag: options.textBytesPerTag }),
  });
  // The timelines list is kept; a run that appears or goes (a new outputDir) is listed at once.
  const timelines = new TimelineList(logdir, clock, options.timelinesMaxAgeSecs === undefined ? undefined : options.timelinesMaxAgeSecs * 1000, (m) => report("timelines", m));
  const runsWatch = store.updates$.subscribe((u) => {
    if (u.runs !== undefined || u.loaded) timelines.invalidate();
  });
  const goodput = new GoodputView(store, (m) => report("goodput", m));
  const issues = store.issues$.subscribe((i) => report("reader", i.message));
  const notices = store.notices$.subscribe((m) => report("thinned", m));
  const live = new LiveEvents(store, clock);
  const env: BoardEnvironment = { version: options.version ?? "" };
  const gate = new Gate(token, port);
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((e: unknown) => {
      report("request", `board: ${req.method} ${req.url}: ${e instanceof Error ? e.message : String(e)}`);
      if (!res.headersSent) res.writeHead(500, { "Content-Type": "text/plain; charset=utf-8" });
      res.end("Internal server error");
    });
  });
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://board.invalid");
    try {
      const setCookie = gate.check(req, url);
      const path = routePath(url.pathname);
      if (path === "/board/events") return live.open(req, res);
      const body =
        path === "/board/series"
          ? answerPageSeries(store, url.searchParams)
          : path === "/board/chart"
            ? answerChartSeries(store, url.searchParams)
            : ((await pageAsset(path)) ??
              (await answerTimelines(timelines, path)) ??
              (await answerGoodput(goodput, path, url.searchParams)) ??
              (await answerData(store, env, req, path, url.searchParams)));
      await respond(req, res, setCookie === undefined ? body : { ...body, headers: { ...body.headers, "Set-Cookie": setCookie } });
    } catch (e) {
      if (!(e instanceof HttpError)) throw e;
      await respondError(req, res, e);
    }
  };
  return {
    url: boardUrl(host, port, token),
    port,
    token,
    store,
    events$: events.events$,
    adopt: () => events.adopt(),
    async close() {
      live.close();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
      await store.close();
      issues.unsubscribe();
      notices.unsubscribe();
      runsWatch.unsubscribe();
      events.complete();
    },
  };
};

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/**
 * The token a board on `host` requires: `given`, or a random one off loopback, or none. Throws
 * `InvalidArgumentError` for a `given` token that is empty or only whitespace: anyone could send it.
 */
export const requiredToken = (host: string, given: string | undefined): string | undefined => {
  if (given !== undefined && given.trim() === "") {
    throw new InvalidArgumentError(
      `the board's token is ${given === "" ? "empty" : "only whitespace"}, which anyone could send: give a non-empty token, or none (on loopback none is needed; elsewhere a random one is generated)`,
    );
  }
  return given ?? (isLoopback(host) ? undefined : randomBytes(24).toString("hex"));
};

/** The URL a board on `host` prints: on every interface, this machine's host name (`0.0.0.0` is no address to open). */
export const boardUrl = (host: string, port: number, token: string | undefined): string => {
  const bare = host.replace(/^\[|\]$/g, "");
  const shown = onAllInterfaces(host) ? hostname() : isIP(bare) === 6 ? `[${bare}]` : bare;
  return `http://${shown}:${port}/${token === undefined ? "" : `?token=${token}`}`;
};

/** `true` for an address that binds every interface: `0.0.0.0`, `::` (however written), or none (`""`, Node's default). */
export const onAllInterfaces = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, "");
  return h === "" || h === "0.0.0.0" || (isIP(h) === 6 && /^[0:]+$/.test(h));
};

/** `true` for an address or name that only this machine reaches. */
export const isLoopback = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  return h === "::1" || /^::ffff:127\./.test(h);
};

const listen = (server: Server, host: string, port: number): Promise<number> =>
  new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve((server.address() as AddressInfo).port);
    });
  });

/** The token rule (or, without a token, the loopback Host rule). */
class Gate {
  private readonly cookieName: string;

  constructor(
    private readonly token: string | undefined,
    port: number,
  ) {
    // Cookies are not kept per port: two boards on one host must not share one.
    this.cookieName = `monitored_session_board_${port}`;
  }

  /** Throws 401/403 for a request that may not pass; returns a cookie to set, if any. */
  check(req: IncomingMessage, url: URL): string | undefined {
    const token = this.token;
    if (token === undefined) {
      const hostname = (req.headers.host ?? "").replace(/:\d+$/, "");
      if (hostname !== "" && !isLoopback(hostname)) throw new HttpError(403, `Forbidden: this board serves loopback only; open it as http://127.0.0.1 or http://localhost, not ${hostname}`);
      return undefined;
    }
    const fromQuery = url.searchParams.get("token");
    if (fromQuery !== null && tokenMatches(token, fromQuery)) return `${this.cookieName}=${token}; Path=/; HttpOnly; SameSite=Strict`;
    const auth = /^Token\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
    if (auth !== null && tokenMatches(token, auth[1] as string)) return undefined;
    const cookie = (req.headers.cookie ?? "").split(/;\s*/).find((c) => c.startsWith(`${this.cookieName}=`));
    if (cookie !== undefined && tokenMatches(token, cookie.slice(this.cookieName.length + 1))) return undefined;
    throw new HttpError(401, "Unauthorized: this board requires its token: open the URL it printed (…/?token=…), or send the header Authorization: Token <token>");
  }
}

/**
 * Whether `candidate` is `token`, in constant time (their SHA-256 digests compared, so neither
 * the content nor the length shows in the time taken). An empty or blank token or candidate
 * never matches: a second wall behind {@link requiredToken}.
 */
export const tokenMatches = (token: string, candidate: string): boolean => {
  const equal = timingSafeEqual(sha256(candidate), sha256(token));
  return equal && token.trim() !== "" && candidate.trim() !== "";
};

const sha256 = (s: string): Buffer => createHash("sha256").update(s).digest();
