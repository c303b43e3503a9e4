/**
 * `/board/events`: the board's live push, as server-sent events (an `EventSource` in the page).
 * Each {@link BoardUpdate} of the store becomes events, in this order:
 *
 * | event | data | when |
 * |---|---|---|
 * | `hello` | `{"runs": [...], "loaded": bool}` | once, on connecting |
 * | `runs` | `["run", …]` (`/data/runs` order) | a run appeared or was deleted |
 * | `purge` | `{"run", "step", "tag"?}` | a restart removed the points at step >= `step` (of every tag of the run, or of `tag`) |
 * | `scalars` | `[{"run", "tag", "points", "lastStep"}, …]` | series grew (or were purged): refetch them |
 * | `views` | `[{"plugin", "run", "tag"?, "count", "lastStep"}, …]` | histograms, images, text (`plugin` names which) or a run's checkpoints (no `tag`) grew or were purged |
 * | `loaded` | `{}` | the first full read of the logdir ended |
 *
 * Updates are throttled by the store (one per 100 ms at most), so a busy writer costs a client
 * one message per window, not one per point. A comment line every 15 s keeps proxies from
 * closing an idle stream.
 *
 * @module
 */

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Subscription } from "rxjs";

import type { Clock, TimerHandle } from "../time/Clock.js";
import type { BoardStore, BoardUpdate } from "./BoardStore.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

const HEARTBEAT_MS = 15_000;

/** The open event streams of a board. */
export class LiveEvents {
  private readonly clients = new Set<ServerResponse>();
  private readonly subscription: Subscription;
  private heartbeat: TimerHandle | undefined;

  constructor(
    private readonly store: BoardStore,
    private readonly clock: Clock,
  ) {
    this.subscription = store.updates$.subscribe((u) => this.broadcast(toMessages(u)));
  }

  /** Opens an event stream on `res`; it lasts until the client goes or {@link close}. */
  open(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache, must-revalidate",
      "X-Content-Type-Options": "nosniff",
      Connection: "keep-alive",
    });
    res.write(`retry: 1000\n\n${message("hello", { runs: this.store.runs(), loaded: this.store.isFullyLoaded })}`);
    this.clients.add(res);
    req.on("close", () => this.clients.delete(res));
    this.beat();
  }

  /** Ends every stream and stops listening to the store. */
  close(): void {
    this.subscription.unsubscribe();
    this.heartbeat?.cancel();
    for (const res of this.clients) res.end();
    this.clients.clear();
  }

  private broadcast(text: string): void {
    if (text === "") return;
    for (const res of this.clients) res.write(text);
  }

  private beat(): void {
    if (this.heartbeat !== undefined) return;
    this.heartbeat = this.clock.setTimer(HEARTBEAT_MS, () => {
      this.heartbeat = undefined;
      if (this.clients.size === 0) return;
      this.broadcast(": keep-alive\n\n");
      this.beat();
    });
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const message = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

const toMessages = (u: BoardUpdate): string =>
  [
    u.runs === undefined ? "" : message("runs", u.runs),
    ...u.purges.map((p) => message("purge", p)),
    u.series.length === 0 ? "" : message("scalars", u.series),
    u.views.length === 0 ? "" : message("views", u.views),
    u.loaded ? message("loaded", {}) : "",
  ].join("");
