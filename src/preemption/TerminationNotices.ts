/**
 * `TerminationNotices`: everything that tells a training process it is about to be stopped, as
 * one stream. Process managers say it in different ways: `docker stop`, Kubernetes and CI
 * cancels send SIGTERM, a terminal's Ctrl-C sends SIGINT, a closed terminal sends SIGHUP, a
 * maintenance script may create a file, a supervisor that dies (npm killed, an SSH session
 * dropped) leaves its child re-parented to init with nobody to stop it, and a cloud platform
 * announces a spot reclaim or a maintenance through its metadata service (see
 * {@link TerminationNotices.watchPlatform}). Each becomes a
 * {@link TerminationNotice}; `PreemptionCheckpointHandler.noticeTermination` turns the first one
 * into a checkpoint at the next step boundary.
 *
 * The file and the parent are polled every `pollSecs` (1 s) on the injected clock; the timer is
 * unref'd, so watching never keeps a finished process alive. A training session gives the
 * event loop turns between steps (see `EventLoopYield`), so signals and polls are served while a
 * synchronous TensorFlow.js loop runs.
 *
 * @example
 * ```ts
 * import { TerminationNotices } from "monitored-session/preemption";
 *
 * const notices = TerminationNotices.start({ watchFile: "/tmp/drain-me" });
 * notices.notices$.subscribe((n) => console.log(`${n.source}: notice ${n.count}`));
 * // ... train; then:
 * notices.close();
 * ```
 *
 * @module
 */

import { existsSync } from "node:fs";
import { ReplaySubject, type Observable } from "rxjs";

import { systemClock, type Clock, type TimerHandle } from "../time/Clock.js";
import { ValueError } from "../errors.js";
import { ComponentEvents } from "../events/componentEvents.js";
import type { SessionEvent } from "../events/SessionEvent.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { FailureStreak } from "./failureStreak.js";
import { PlatformPoller, type PlatformName, type PlatformNotice, type PlatformPollerOptions, type PlatformWatcher } from "./platforms/PlatformWatcher.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The notices watching each output stream for a broken pipe (one error listener per stream, for the life of the process). */
const outputWatchers = new WeakMap<NodeJS.EventEmitter, Set<TerminationNotices>>();

/** Why the process is being told to stop. */
export type TerminationSource = NodeJS.Signals | "watchFile" | "parentExited" | "outputClosed" | PlatformName;

/** One termination notice. */
export interface TerminationNotice {
  readonly source: TerminationSource;
  /** The clock's epoch milliseconds when it was noticed. */
  readonly time: number;
  /**
   * 1 for the first notice; 2, 3… for each later SIGINT or SIGTERM (a user pressing Ctrl-C
   * again to stop waiting for the save). Duplicates of the first signal within
   * `duplicateWindowMs` do not count.
   */
  readonly count: number;
  /**
   * The clock's epoch milliseconds when the process will be killed, when the source says: a
   * platform notice's time, or SIGTERM plus a Kubernetes pod's grace period.
   */
  readonly deadline?: number | undefined;
}

/** Where signals come from and who the parent is (default `process`; tests pass a fake). */
export interface NoticeProcess {
  on(signal: NodeJS.Signals, listener: () => void): unknown;
  off(signal: NodeJS.Signals, listener: () => void): unknown;
  /** The parent's pid now; a change means the parent exited and the process was re-parented. */
  readonly ppid: number;
}

/** Options of {@link TerminationNotices.start}. */
export interface TerminationNoticesOptions {
  /** Signals that are notices (default SIGTERM, SIGINT and SIGHUP). Each is handled: none kills the process. */
  readonly signals?: readonly NodeJS.Signals[] | undefined;
  /** A file whose appearance is a notice (polled every `pollSecs`). */
  readonly watchFile?: string | undefined;
  /**
   * Treat the death of the parent process as a notice (default `true`): no orphan trains on
   * when the npm, shell or SSH session that started it is gone. Ignored when the parent is
   * already init (pid 1) or absent (pid 0), as for a container's main process.
   */
  readonly watchParent?: boolean | undefined;
  /**
   * Streams whose reader may go away (default: this process's stdout and stderr, unless
   * `process` is given). A write that fails because nobody reads any more (EPIPE: `launch` or
   * the shell pipe that read the output is gone) is a notice (`outputClosed`) when it is the
   * first, and no write error on them ends the process: it still reaches its save. Once
   * installed, the guard against write errors stays for the life of the process.
   */
  readonly watchOutputs?: readonly NodeJS.EventEmitter[] | undefined;
  /** How often the file and the parent are polled (default 1 s). */
  readonly pollSecs?: number | undefined;
  /**
   * A repeat of the first signal within this many milliseconds is the same notice, not a second
   * one (default 500). A terminal's Ctrl-C reaches both npm and the trainer, and npm forwards
   * its copy: without this, one keypress would count twice.
   */
  readonly duplicateWindowMs?: number | undefined;
  /** Signals received before `start` (by the CLI's entry point while it loaded), replayed in order. */
  readonly earlier?: readonly NodeJS.Signals[] | undefined;
  /** A cloud platform's notice channel to watch as well (see {@link TerminationNotices.watchPlatform}). */
  readonly platform?: PlatformWatcher | undefined;
  /** How the platform is polled (every 1 s, each request aborted after 2 s, by default). */
  readonly platformPolling?: Pick<PlatformPollerOptions, "pollSecs" | "timeoutSecs"> | undefined;
  readonly process?: NoticeProcess | undefined;
  readonly fileExists?: ((path: string) => boolean) | undefined;
  readonly clock?: Clock | undefined;
  /**
   * Prints the watcher's lines (default: the process's default logger) until a session adopts
   * its {@link TerminationNotices.events$}; given a runtime's or a handler's logger, they join
   * that stream instead.
   */
  readonly logger?: Logger | undefined;
}

/** The default notice signals: SIGTERM (process managers), SIGINT (Ctrl-C), SIGHUP (a closed terminal). */
export const DEFAULT_NOTICE_SIGNALS: readonly NodeJS.Signals[] = ["SIGTERM", "SIGINT", "SIGHUP"];

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** Watches signals, a file and the parent process; emits each notice on {@link notices$}. */
export class TerminationNotices {
  private readonly subject = new ReplaySubject<TerminationNotice>();
  /** Every notice; a late subscriber gets the earlier ones first (the first is also {@link first}). */
  readonly notices$: Observable<TerminationNotice> = this.subject.asObservable();
  private firstNotice: TerminationNotice | undefined;
  private count = 0;
  private readonly listeners: [NodeJS.Signals, () => void][] = [];
  /** The sets of watchers of each output this instance watches (see `watchOutputs`). */
  private readonly outputs: Set<TerminationNotices>[] = [];
  private timer: TimerHandle | undefined;
  private watchedFile: string | undefined;
  private platform: PlatformPoller | undefined;
  private platformNotice: PlatformNotice | undefined;
  private signalGraceSecs: number | undefined;
  private readonly initialPpid: number;
  private closed = false;
  private readonly events: ComponentEvents;
  private readonly logger: Logger;
  /** The watched file's checks that failed, warned once per streak. */
  private readonly fileStreak: FailureStreak;

  private constructor(
    private readonly proc: NoticeProcess,
    private readonly watchParent: boolean,
    private readonly pollMs: number,
    private readonly duplicateWindowMs: number,
    private readonly fileExists: (path: string) => boolean,
    private readonly clock: Clock,
    fallback: Logger,
  ) {
    this.initialPpid = proc.ppid;
    this.events = new ComponentEvents(fallback, () => clock.now(), "notices");
    this.logger = this.events.logger;
    this.fileStreak = new FailureStreak(this.logger);
  }

  /** Starts watching. Throws `ValueError` for a non-positive poll interval or a negative window. */
  static start(options: TerminationNoticesOptions = {}): TerminationNotices {
    const pollSecs = options.pollSecs ?? 1;
    if (!(pollSecs > 0) || !Number.isFinite(pollSecs)) throw new ValueError(`TerminationNotices: pollSecs must be a positive number, got ${String(pollSecs)}`);
    const window = options.duplicateWindowMs ?? 500;
    if (!(window >= 0)) throw new ValueError(`TerminationNotices: duplicateWindowMs must be >= 0, got ${String(window)}`);
    const proc = options.process ?? process;
    const n = new TerminationNotices(
      proc,
      options.watchParent ?? true,
      pollSecs * 1000,
      window,
      options.fileExists ?? existsSync,
      options.clock ?? systemClock,
      options.logger ?? defaultLogger,
    );
    for (const signal of options.signals ?? DEFAULT_NOTICE_SIGNALS) {
      const listener = (): void => n.signal(signal);
      proc.on(signal, listener);
      n.listeners.push([signal, listener]);
    }
    for (const stream of options.watchOutputs ?? (options.process === undefined ? [process.stdout, process.stderr] : [])) n.watchOutput(stream);
    for (const s of options.earlier ?? []) n.signal(s);
    if (options.watchFile !== undefined) n.watchFile(options.watchFile);
    if (options.platform !== undefined) n.watchPlatform(options.platform, options.platformPolling);
    n.schedule();
    return n;
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /**
   * The watcher's lines as `log` events (source `notices`, and `platform` for its cloud
   * platform's poller): a notice file that cannot be checked, a platform that stops or starts
   * answering. The notices themselves are on {@link notices$}. Its `logger` option prints the
   * lines until a session adopts them (`session.forwardEvents(notices)`).
   */
  get events$(): Observable<SessionEvent> {
    return this.events.events$;
  }

  /** The caller prints the watcher's lines from now on; the function returned hands them back. */
  adopt(): () => void {
    return this.events.adopt();
  }

  /** The first notice, or `undefined` while none came. */
  get first(): TerminationNotice | undefined {
    return this.firstNotice;
  }

  /** A notice's source as people say it: `SIGTERM`, `the file … appeared`, `the parent process exited`. */
  describe(n: TerminationNotice): string {
    if (n.source === "watchFile") return `the file ${this.watchedFile ?? "being watched"} appeared`;
    if (n.source === this.platformNotice?.platform) return `${n.source}: ${this.platformNotice.detail}`;
    if (n.source === "outputClosed") return "the process reading its output is gone (a broken pipe)";
    return n.source === "parentExited" ? "the parent process exited" : n.source;
  }

  /** Starts watching `path` (a configuration read after `start` may name it). */
  watchFile(path: string): void {
    this.watchedFile = path;
    this.check();
  }

  /**
   * Also watches a cloud platform: its metadata service is polled (from a zero-delay timer, so
   * this returns at once) and its notice is one more {@link TerminationNotice}, with the
   * platform's deadline. A platform that only signals (Kubernetes) gives SIGTERM notices its
   * grace period as their deadline. One platform at a time: a second call replaces the first.
   */
  watchPlatform(watcher: PlatformWatcher, polling: Pick<PlatformPollerOptions, "pollSecs" | "timeoutSecs"> = {}): void {
    this.platform?.close();
    this.signalGraceSecs = watcher.signalGraceSecs;
    if (this.closed) return;
    this.platform = PlatformPoller.start(
      watcher,
      (p) => {
        // After a signal the process is stopping already; only a repeated interrupt counts again.
        if (this.firstNotice !== undefined) return;
        this.platformNotice = p;
        this.notice(p.platform, p.deadlineMs);
      },
      { ...polling, clock: this.clock, logger: this.logger },
    );
  }

  /**
   * Tells the platform the save is done (Azure starts its scheduled event at once). A no-op
   * without a platform notice; never rejects (a failure is logged).
   */
  acknowledge(): Promise<void> {
    return this.platform?.acknowledge() ?? Promise.resolve();
  }

  /** Stops watching: removes the signal handlers and the poll timer, completes {@link notices$}. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const [s, l] of this.listeners.splice(0)) this.proc.off(s, l);
    for (const watchers of this.outputs.splice(0)) watchers.delete(this);
    this.timer?.cancel();
    this.timer = undefined;
    this.platform?.close();
    this.subject.complete();
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  /** Listens for `stream`'s write errors (see {@link TerminationNoticesOptions.watchOutputs}). */
  private watchOutput(stream: NodeJS.EventEmitter): void {
    let watchers = outputWatchers.get(stream);
    if (watchers === undefined) {
      const set = new Set<TerminationNotices>();
      watchers = set;
      outputWatchers.set(stream, set);
      // Never removed: a write error must not end the process after the watch closed either.
      stream.on("error", (e: unknown) => {
        if ((e as { code?: unknown } | undefined)?.code !== "EPIPE") return;
        for (const w of set) w.outputClosed();
      });
    }
    watchers.add(this);
    this.outputs.push(watchers);
  }

  private outputClosed(): void {
    if (this.closed || this.firstNotice !== undefined) return;
    this.notice("outputClosed");
  }

  private signal(signal: NodeJS.Signals): void {
    const first = this.firstNotice;
    if (first !== undefined) {
      // Only an interrupt repeated on purpose counts again; a forwarded copy does not.
      if (signal !== "SIGINT" && signal !== "SIGTERM") return;
      if (first.source === signal && this.clock.now() - first.time < this.duplicateWindowMs) return;
    }
    const grace = signal === "SIGTERM" ? this.signalGraceSecs : undefined;
    this.notice(signal, grace === undefined ? undefined : this.clock.now() + grace * 1000);
  }

  private notice(source: TerminationSource, deadline?: number): void {
    if (this.closed) return;
    this.count += 1;
    const time = this.clock.now();
    const n: TerminationNotice = deadline === undefined ? { source, time, count: this.count } : { source, time, count: this.count, deadline };
    this.firstNotice ??= n;
    this.subject.next(n);
  }

  private check(): void {
    if (this.closed || this.firstNotice !== undefined) return;
    const file = this.watchedFile;
    if (file !== undefined) {
      try {
        const exists = this.fileExists(file);
        this.fileStreak.succeeded(`TerminationNotices: ${file} can be checked again.`);
        if (exists) return this.notice("watchFile");
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        this.fileStreak.failed(`TerminationNotices: cannot check ${file} (polling goes on): ${why}`, `TerminationNotices: cannot check ${file} again: ${why}`);
      }
    }
    if (this.watchParent && this.initialPpid > 1 && this.proc.ppid !== this.initialPpid) this.notice("parentExited");
  }

  private schedule(): void {
    this.timer = this.clock.setTimer(this.pollMs, () => {
      this.check();
      if (!this.closed && this.firstNotice === undefined) this.schedule();
    });
  }
}
