/**
 * `CheckpointDirLock`: one writer per checkpoint directory. A process that writes checkpoints
 * holds `<dir>/checkpoint.lock`, which names it (pid, host, process start time, boot id). A
 * second writer fails with {@link CheckpointDirInUseError} before it writes anything.
 *
 * - **Atomic acquisition**: the record is written to a private temporary file and `link`ed to
 *   the lock's name, which fails if the name exists; nobody ever reads a half-written lock.
 * - **Same host** (same hostname and boot id): the lock is stale only if that exact process is
 *   gone: its pid is absent, or the pid now belongs to a process that started at another time
 *   (Linux `/proc/<pid>/stat`). Elsewhere, without `/proc`, a live pid counts as the holder.
 * - **Another host** (a shared filesystem, a replaced pod): the lock is a lease. The holder
 *   rewrites it every `refreshSecs` on its clock; it is taken over when it was not refreshed
 *   for `leaseTimeoutSecs` (clocks of the hosts must agree to well within that timeout).
 * - **Takeover** is race-safe: the stale lock is renamed to a private name and compared with
 *   what was judged stale; if it is not that lock (it was refreshed, or another process took
 *   it meanwhile), it is put back. Only then is a new lock linked in, which can still lose to
 *   a faster process (and then reports it).
 *
 * Why not `proper-lockfile` (npm): its staleness is an mtime threshold for every holder, local
 * or not, so a live local process whose event loop is blocked longer than the threshold (a
 * long synchronous TensorFlow.js step) loses its lock, and a dead local holder is only
 * noticed after the threshold; it records nobody's identity, so the error cannot name the
 * holder; and its timers are Node's, not the injected `Clock`, so lease expiry cannot be
 * tested on a virtual clock. Those are the rules this lock exists for.
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { link, readdir, readFile, rename, unlink, writeFile } from "node:fs/promises";
import { hostname as osHostname } from "node:os";
import { join, resolve } from "node:path";

import { systemClock, type Clock, type TimerHandle } from "../time/Clock.js";
import { ValueError } from "../errors.js";
import { defaultLogger, type Logger } from "../Logger.js";
import { decodeLines, NonNegativeInt, strictType } from "../codec.js";
import { isProcessAlive, mkdirDurable, TEMP_MARKER, unlinkIfExists } from "./internal/files.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** The lock file's name inside a checkpoint directory. */
export const LOCK_FILENAME = "checkpoint.lock";

const LOCK_FORMAT = "monitored-session/lock";

/** Who holds a checkpoint directory: the contents of its lock file. */
export interface LockHolder {
  readonly pid: number;
  readonly hostname: string;
  /** The process's start time in clock ticks since boot (`/proc/<pid>/stat`), `null` where unknown. */
  readonly startTime: string | null;
  /** The host's boot id (`/proc/sys/kernel/random/boot_id`), `null` where unknown. */
  readonly bootId: string | null;
  /** When the lock was taken, epoch ms of the holder's clock. */
  readonly acquiredAtMs: number;
  /** When the holder last refreshed the lease, epoch ms of the holder's clock. */
  readonly refreshedAtMs: number;
  /** A random token that tells this acquisition from any other. */
  readonly token: string;
}

const NullableString = t.union([t.string, t.null]);
const LockFileCodec = strictType(
  {
    format: t.literal(LOCK_FORMAT),
    version: t.literal(1),
    pid: NonNegativeInt,
    hostname: t.string,
    startTime: NullableString,
    bootId: NullableString,
    acquiredAtMs: NonNegativeInt,
    refreshedAtMs: NonNegativeInt,
    token: t.string,
  },
  "CheckpointDirLock",
);

/** The identity of a process: what a lock records besides its times and token. */
export interface ProcessIdentity {
  readonly pid: number;
  readonly hostname: string;
  readonly startTime: string | null;
  readonly bootId: string | null;
}

/** Options of {@link CheckpointDirLock.acquire}. */
export interface CheckpointDirLockOptions {
  /**
   * A lock from another host that was not refreshed for this long is taken over (default 60).
   * Locks of this host are never taken over while their process lives.
   */
  readonly leaseTimeoutSecs?: number | undefined;
  /** How often the holder refreshes its lease (default a third of `leaseTimeoutSecs`, at most 10 s). */
  readonly refreshSecs?: number | undefined;
  /**
   * Wait out the lease of a holder with this host's name on another boot (a pod recreated on
   * another node keeps its hostname; a rebooted machine too): its process is gone with its old
   * node or boot, only its lease may still be running. Logs one line naming the holder, waits up
   * to `leaseTimeoutSecs` on the clock for the lease to run out, and takes the lock over; a
   * holder that refreshes its lease meanwhile is alive, and the acquisition fails as usual.
   * Default false (fail at once).
   */
  readonly waitOutPredecessorLease?: boolean | undefined;
  /** Lease times and the refresh timer (default the system clock, whose timers do not keep the process alive). */
  readonly clock?: Clock | undefined;
  /** Where takeovers and a lost lock are reported. */
  readonly logger?: Logger | undefined;
  /** @internal This process as the lock records it (tests pose as another process). */
  readonly identity?: ProcessIdentity | undefined;
}

/**
 * The checkpoint directory is held by another writer (another process, or another session of
 * this process that was not handed the owner's `CheckpointManager`). The message is one line
 * naming the holder.
 */
export class CheckpointDirInUseError extends Error {
  override readonly name = "CheckpointDirInUseError";
  constructor(
    /** The checkpoint directory (absolute). */
    readonly directory: string,
    /** The holder, as its lock file names it. */
    readonly holder: LockHolder,
    /** Whether the holder is this very process. */
    readonly sameProcess: boolean,
  ) {
    super(
      `${directory} is in use by pid ${holder.pid} on host ${holder.hostname} since ${timeOfDay(holder.acquiredAtMs)}` +
        (sameProcess
          ? " (this process: hand the owner's CheckpointManager to the second session via its checkpointManager option)"
          : "; stop that process or use another checkpoint directory"),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** A held checkpoint-directory lock. Take it with {@link CheckpointDirLock.acquire}; give it back with {@link release}. */
export class CheckpointDirLock {
  private timer: TimerHandle | undefined;
  private released = false;
  private refreshing: Promise<void> | undefined;
  private lostTo: LockHolder | null = null;
  private record: LockHolder;

  private constructor(
    /** The checkpoint directory (absolute). */
    readonly directory: string,
    /** The lock file. */
    readonly path: string,
    record: LockHolder,
    private readonly refreshMs: number,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {
    this.record = record;
  }

  /**
   * Takes the lock of `directory` (creating the directory), taking over a stale one with a
   * warning naming its old holder. Throws {@link CheckpointDirInUseError} if a live process
   * holds it, `ValueError` for invalid options.
   */
  static async acquire(directory: string, options: CheckpointDirLockOptions = {}): Promise<CheckpointDirLock> {
    const leaseMs = secsOption("leaseTimeoutSecs", options.leaseTimeoutSecs, 60) * 1000;
    const refreshMs = secsOption("refreshSecs", options.refreshSecs, Math.min(leaseMs / 3000, 10)) * 1000;
    if (refreshMs >= leaseMs) {
      throw new ValueError(`CheckpointDirLock: refreshSecs (${refreshMs / 1000}) must be less than leaseTimeoutSecs (${leaseMs / 1000})`);
    }
    const clock = options.clock ?? systemClock;
    const logger = options.logger ?? defaultLogger;
    const me = options.identity ?? currentProcess();
    const dir = resolve(directory);
    const path = join(dir, LOCK_FILENAME);
    // Durable in its parent now: the saves made under this lock record into it.
    await mkdirDurable(dir);
    // Each round either takes the lock, fails, or removed a stale lock (a bounded number of
    // times: every removal needs another process to have taken and abandoned it meanwhile).
    let waited = false;
    for (let round = 0; round < 8; round++) {
      const now = Math.round(clock.now());
      const record: LockHolder = { ...me, acquiredAtMs: now, refreshedAtMs: now, token: randomBytes(12).toString("hex") };
      if (await createExclusive(path, render(record))) {
        const lock = new CheckpointDirLock(dir, path, record, refreshMs, clock, logger);
        lock.schedule();
        await removeStaleTemps(dir);
        return lock;
      }
      const seen = await readLock(path);
      if (seen === null) continue; // released meanwhile
      const why = seen.holder === null ? "its lock file is unreadable" : staleness(seen.holder, me, now, leaseMs);
      if (why === null && !waited && options.waitOutPredecessorLease === true && seen.holder !== null && isPredecessor(seen.holder, me)) {
        // At most one wait: a lease still running after it was refreshed, by a live process.
        waited = true;
        const waitMs = Math.min(Math.max(0, seen.holder.refreshedAtMs + leaseMs - now) + PREDECESSOR_MARGIN_MS, leaseMs + PREDECESSOR_MARGIN_MS);
        logger.warn(
          `${dir} is held by pid ${seen.holder.pid} on host ${seen.holder.hostname} (boot id ${seen.holder.bootId ?? "unknown"}, since ${timeOfDay(seen.holder.acquiredAtMs)}), this host's name on another node or boot: a predecessor of this task. Waiting ${Math.ceil(waitMs / 1000)} s for its lease to run out (leaseTimeoutSecs ${leaseMs / 1000}).`,
          { path },
        );
        await clock.sleep(waitMs);
        continue;
      }
      if (why === null) throw new CheckpointDirInUseError(dir, seen.holder as LockHolder, isSameProcess(seen.holder as LockHolder, me));
      if (await removeIfUnchanged(path, seen.raw)) {
        logger.warn(`Took over the checkpoint directory lock ${path} from ${describeHolder(seen.holder, seen.raw)}: ${why}.`, { path });
      }
    }
    const last = await readLock(path);
    if (last?.holder != null) throw new CheckpointDirInUseError(dir, last.holder, isSameProcess(last.holder, me));
    throw new ValueError(`CheckpointDirLock: could not take ${path}: other processes keep taking and abandoning it`);
  }

  // -------------------------------------------------------------------------------------------
  // operations
  // -------------------------------------------------------------------------------------------

  /** Who this lock says holds the directory (this process). */
  get holder(): LockHolder {
    return this.record;
  }

  /**
   * Checks that the lock file is still this lock (not taken over after this process stalled
   * beyond the lease); throws {@link CheckpointDirInUseError} naming the new holder otherwise.
   * Called before each save is recorded.
   */
  async verify(): Promise<void> {
    if (this.released) throw new ValueError(`CheckpointDirLock: the lock of ${this.directory} was released`);
    if (this.lostTo === null) {
      const seen = await readLock(this.path);
      if (seen?.holder?.token !== this.record.token) this.lostTo = seen?.holder ?? unknownHolder;
    }
    if (this.lostTo !== null) throw new CheckpointDirInUseError(this.directory, this.lostTo, false);
  }

  /**
   * What a commit on another thread checks right before it records a save (the lock file, and
   * this lock's token in it); throws as {@link verify} does if the lock is released or known
   * lost. The commit reports the file's text if the token is not there: {@link lostWith}.
   *
   * @internal
   */
  expectation(): { readonly path: string; readonly token: string } {
    if (this.released) throw new ValueError(`CheckpointDirLock: the lock of ${this.directory} was released`);
    if (this.lostTo !== null) throw new CheckpointDirInUseError(this.directory, this.lostTo, false);
    return { path: this.path, token: this.record.token };
  }

  /**
   * Records that the lock file read `raw` (`null`: none) without this lock's token, and throws
   * {@link CheckpointDirInUseError} naming who holds it now.
   *
   * @internal
   */
  lostWith(raw: string | null): never {
    const holder = raw === null ? null : parseLock(raw);
    this.lostTo ??= holder !== null && holder.token !== this.record.token ? holder : unknownHolder;
    throw new CheckpointDirInUseError(this.directory, this.lostTo, false);
  }

  /**
   * Stops refreshing, waits for a refresh in flight, and deletes the lock file if it is still
   * this lock. Idempotent.
   */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    this.timer?.cancel();
    this.timer = undefined;
    // A refresh that is renaming its record into place would recreate the file afterwards.
    await this.refreshing;
    try {
      const current = await readLock(this.path);
      if (current?.holder?.token === this.record.token) await unlink(this.path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") {
        this.logger.warn(`Could not release the checkpoint directory lock ${this.path}: ${(e as Error).message}`, { path: this.path });
      }
    }
  }

  // -------------------------------------------------------------------------------------------
  // internals
  // -------------------------------------------------------------------------------------------

  private schedule(): void {
    if (this.released) return;
    this.timer = this.clock.setTimer(this.refreshMs, () => {
      this.timer = undefined;
      // refresh() never rejects.
      this.refreshing = this.refresh().finally(() => {
        this.refreshing = undefined;
        this.schedule();
      });
    });
  }

  /** Rewrites the lease with a new refresh time, unless the lock was taken over. */
  private async refresh(): Promise<void> {
    if (this.released || this.lostTo !== null) return;
    try {
      const seen = await readLock(this.path);
      if (seen?.holder?.token !== this.record.token) {
        this.lostTo = seen?.holder ?? unknownHolder;
        this.logger.error(
          `Lost the checkpoint directory lock ${this.path} to ${describeHolder(seen?.holder ?? null, seen?.raw ?? "(no lock file)")}; the next checkpoint save fails.`,
          { path: this.path },
        );
        return;
      }
      const next = { ...this.record, refreshedAtMs: Math.round(this.clock.now()) };
      const tmp = tempName(this.path);
      await writeFile(tmp, render(next), { flag: "wx" });
      if (this.released) {
        await unlink(tmp);
        return;
      }
      await rename(tmp, this.path);
      this.record = next;
    } catch (e) {
      this.logger.warn(`Could not refresh the checkpoint directory lock ${this.path}: ${(e as Error).message}`, { path: this.path });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

/** This process as a lock records it. Linux facts come from `/proc`; elsewhere they are `null`. */
export const currentProcess = (): ProcessIdentity => ({
  pid: process.pid,
  hostname: osHostname(),
  startTime: processStartTime(process.pid),
  bootId: bootId(),
});

/** Why `holder` is stale as seen by `me` at `now`, or `null` if it still holds the directory. */
const staleness = (holder: LockHolder, me: ProcessIdentity, now: number, leaseMs: number): string | null => {
  const sameHost = holder.hostname === me.hostname && holder.bootId === me.bootId;
  if (sameHost) {
    if (isSameProcess(holder, me)) return null;
    if (!isProcessAlive(holder.pid)) return `process ${holder.pid} is gone`;
    if (holder.startTime === null) return null;
    const started = processStartTime(holder.pid);
    return started === null || started === holder.startTime ? null : `pid ${holder.pid} now belongs to another process`;
  }
  const age = now - holder.refreshedAtMs;
  return age > leaseMs ? `its lease was last refreshed ${Math.round(age / 1000)} s ago (lease timeout ${leaseMs / 1000} s)` : null;
};

/** Waited past the lease's end, so that a holder's clock a little ahead does not make the lease look fresh. */
const PREDECESSOR_MARGIN_MS = 1000;

/** A holder with this host's name on another boot (see `waitOutPredecessorLease`). */
const isPredecessor = (holder: LockHolder, me: ProcessIdentity): boolean => holder.hostname === me.hostname && holder.bootId !== me.bootId;

const isSameProcess = (holder: LockHolder, me: ProcessIdentity): boolean =>
  holder.pid === me.pid && holder.hostname === me.hostname && holder.bootId === me.bootId && holder.startTime === me.startTime;

/** Creates `path` with `text` if it does not exist, atomically (link of a private file). */
const createExclusive = async (path: string, text: string): Promise<boolean> => {
  const tmp = tempName(path);
  await writeFile(tmp, text, { flag: "wx" });
  try {
    await link(tmp, path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw e;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
};

/**
 * Removes the lock at `path` if it still is the one read as `raw`: renames it to a private
 * name, compares, and puts it back if another process refreshed or took it meanwhile.
 * Resolves `true` if it removed that lock.
 */
const removeIfUnchanged = async (path: string, raw: string): Promise<boolean> => {
  const aside = tempName(path);
  try {
    await rename(path, aside);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
  const moved = await readFile(aside, "utf8").catch(() => null);
  if (moved === raw) {
    await unlink(aside);
    return true;
  }
  // Not the lock judged stale: put it back (unless yet another process got in, whose lock wins).
  await link(aside, path).catch(() => undefined);
  await unlink(aside).catch(() => undefined);
  return false;
};

/** A private name next to `path`, naming this process (see {@link removeStaleTemps}). */
const tempName = (path: string): string => `${path}${TEMP_MARKER}${process.pid}-${randomBytes(6).toString("hex")}`;

/**
 * Removes the lock's temporary files left by processes of this host that died while taking or
 * refreshing it (this process's own are in use).
 */
const removeStaleTemps = async (dir: string): Promise<void> => {
  const prefix = `${LOCK_FILENAME}${TEMP_MARKER}`;
  for (const name of await readdir(dir)) {
    const pid = Number(/^(\d+)-/.exec(name.slice(prefix.length))?.[1]);
    if (name.startsWith(prefix) && Number.isSafeInteger(pid) && pid !== process.pid && !isProcessAlive(pid)) {
      await unlinkIfExists(join(dir, name));
    }
  }
};

/** The lock at `path`: its raw text and holder (`null` if undecodable), or `null` if there is none. */
const readLock = async (path: string): Promise<{ raw: string; holder: LockHolder | null } | null> => {
  let raw: string;
  try {
    raw = await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
  return { raw, holder: parseLock(raw) };
};

const parseLock = (raw: string): LockHolder | null => {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return null;
  }
  return pipe(
    decodeLines(LockFileCodec, json),
    E.match(
      () => null,
      ({ format: _f, version: _v, ...holder }) => holder,
    ),
  );
};

const render = (h: LockHolder): string => `${JSON.stringify({ format: LOCK_FORMAT, version: 1, ...h }, null, 1)}\n`;

const unknownHolder: LockHolder = { pid: 0, hostname: "(unknown)", startTime: null, bootId: null, acquiredAtMs: 0, refreshedAtMs: 0, token: "" };

const describeHolder = (h: LockHolder | null, raw: string): string =>
  h === null ? `an unreadable lock (${JSON.stringify(raw.slice(0, 80))})` : `pid ${h.pid} on host ${h.hostname} (since ${timeOfDay(h.acquiredAtMs)})`;

/** `HH:MM:SS` local time of an epoch-ms instant (formatting only; the instant comes from a clock). */
const timeOfDay = (ms: number): string => new Date(ms).toTimeString().slice(0, 8);

const secsOption = (name: string, v: number | undefined, fallback: number): number => {
  const s = v ?? fallback;
  if (!(Number.isFinite(s) && s > 0)) throw new ValueError(`CheckpointDirLock: ${name} must be a positive number of seconds, got ${String(v)}`);
  return s;
};

const bootId = (): string | null => {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || null;
  } catch {
    return null;
  }
};

/** Field 22 of `/proc/<pid>/stat` (start time in clock ticks after boot), or `null`. */
const processStartTime = (pid: number): string | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) is parenthesized and may hold spaces: count after the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19] ?? null;
  } catch {
    return null;
  }
};
