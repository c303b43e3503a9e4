/**
 * The ring's schedule: which elements of a buffer each rank sends and receives, in which order,
 * in a chunked ring all-reduce (a reduce-scatter then an all-gather), the two-rank exchange, or
 * a broadcast; and the algorithms that follow it over a {@link RingTransport} (the links and
 * credit window of a `TcpCollective`). The schedule is pure arithmetic on a buffer's length,
 * element size and the chunk size. See docs/performance.md ("Ring all-reduce").
 *
 * @module
 */

import type { CollectiveBuffer } from "../../session/Collective.js";
import { type Frame, PLACED } from "./creditWindow.js";
import { reduceInto, reduceIntoDstFirst, typedView } from "./reduce.js";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** Elements `[a, b)` of a buffer, and the divisor of a mean's last reduction (`undefined`: a chunk copied, not reduced). */
export interface RingChunk {
  readonly a: number;
  readonly b: number;
  readonly divisor: number | undefined;
}

/** One rank's part in a ring all-reduce of buffers of one length and element size (see {@link ringSchedule}). */
export interface RingSchedule {
  readonly elements: number;
  readonly bytesPerElement: number;
  readonly mean: boolean;
  readonly own: readonly (readonly [number, number])[];
  readonly reduceSteps: readonly (readonly RingChunk[])[];
  readonly gatherSteps: readonly (readonly RingChunk[])[];
  readonly expected: readonly RingChunk[];
}

/** What the ring's algorithms do with a call `C` on a rank's links. */
export interface RingTransport<C> {
  readonly rank: number;
  readonly size: number;
  /** The rank this one sends to. */
  readonly next: number;
  readonly chunkBytes: number;
  /** Sends elements `[a, b)` of `buffer` to the next rank. */
  send(call: C, buffer: CollectiveBuffer, a: number, b: number): void;
  /** The previous rank's next chunk of `call`, of `elements` elements. */
  receive(call: C, elements: number): Promise<Frame>;
  /** The chunks the call receives, in order, so each may go straight into `buffer`. */
  expect(call: C, buffer: CollectiveBuffer, chunks: readonly RingChunk[]): void;
  /** Copies a received chunk to `buffer[a…]` (unless it was received there) and releases it. */
  place(buffer: CollectiveBuffer, a: number, frame: Frame): void;
  /** The chunk was consumed: its credit goes back (with `later`, at the next turn of the event loop). */
  release(frame: Frame, later?: boolean): void;
  /** Resolves when every chunk of the call was handed to the kernel. */
  flushed(call: C): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/**
 * Reduce-scatter then all-gather. Segment s (a contiguous 1/N of the buffer) starts at rank s
 * and is summed as ((x_s + x_{s+1}) + …) + x_{s−1}, once, by the ranks in ring order; its owner
 * (rank s−1) divides it for a mean; the all-gather copies the result. Each received chunk is
 * reduced and sent on at once, so chunks of one step overlap those of the next.
 */
export const ringAllReduce = async <C>(ring: RingTransport<C>, call: C, buffer: CollectiveBuffer, schedule: () => RingSchedule): Promise<void> => {
  const n = ring.size;
  if (n === 1) return;
  const { own, reduceSteps, gatherSteps, expected } = schedule();
  ring.expect(call, buffer, expected);
  for (const [a, b] of own) ring.send(call, buffer, a, b);
  for (const chunks of reduceSteps) {
    for (const { a, b, divisor } of chunks) {
      const frame = await ring.receive(call, b - a);
      if (frame.slot !== PLACED) reduceInto(buffer.subarray(a, b), typedView(buffer, frame.payload), divisor ?? 1);
      ring.release(frame);
      ring.send(call, buffer, a, b);
    }
  }
  for (const [k, chunks] of gatherSteps.entries()) {
    for (const { a, b } of chunks) {
      ring.place(buffer, a, await ring.receive(call, b - a));
      if (k < n - 2) ring.send(call, buffer, a, b);
    }
  }
  await ring.flushed(call);
};

/**
 * Two ranks and a buffer of one chunk (or none: a barrier): each rank sends its whole buffer
 * and adds the other's. The ring would take two dependent hops of half the buffer (the
 * reduce-scatter's, then the all-gather's); this is one hop of the whole buffer each way, with
 * the same bytes sent and received. Each segment is added in the ring's order (segment s as
 * x_s + x_{s+1}, then divided for a mean), so both ranks get exactly the ring's bits, NaN
 * payloads included. The peer's chunk waits in a receive slot until this rank's own bytes were
 * handed to the kernel: they are sent from the caller's buffer, which the sum overwrites. The
 * slot's credit goes back at the next turn of the event loop, not before the call resolves:
 * the end of the call is on a training step's critical path, where the write took about 0.1 ms. The other rank needs it no
 * sooner: this rank's next data frame implies it (see `TcpCollective.impliedCredit`), and a next call
 * in which this rank sends nothing turns the event loop while it waits.
 */
export const exchangeAllReduce = async <C>(ring: RingTransport<C>, call: C, buffer: CollectiveBuffer, mean: boolean): Promise<void> => {
  ring.expect(call, buffer, []);
  ring.send(call, buffer, 0, buffer.length);
  const frame = await ring.receive(call, buffer.length);
  try {
    await ring.flushed(call);
    const theirs = typedView(buffer, frame.payload);
    const divisor = mean ? 2 : 1;
    for (let s = 0; s < 2 && buffer.length > 0; s++) {
      const [a, b] = segment(buffer.length, 2, s);
      // Segment s starts at rank s: this rank's value comes first in its own segment.
      (s === ring.rank ? reduceIntoDstFirst : reduceInto)(buffer.subarray(a, b), theirs.subarray(a, b), divisor);
    }
  } finally {
    ring.release(frame, true);
  }
};

/** A pipeline from the root around the ring; the rank before the root does not send. */
export const ringBroadcast = async <C>(ring: RingTransport<C>, call: C, buffer: CollectiveBuffer, root: number): Promise<void> => {
  if (ring.size === 1) return;
  const all = chunkRanges(ring.chunkBytes, buffer, [0, buffer.length]);
  if (ring.rank === root) {
    for (const [a, b] of all) ring.send(call, buffer, a, b);
  } else {
    ring.expect(call, buffer, all.map(([a, b]) => ({ a, b, divisor: undefined })));
    for (const [a, b] of all) {
      ring.place(buffer, a, await ring.receive(call, b - a));
      if (ring.next !== root) ring.send(call, buffer, a, b);
    }
  }
  await ring.flushed(call);
};


/**
 * Rank `rank`'s chunks (of at most `chunkBytes`) of a ring all-reduce of `buffer`'s length and
 * element size over `size` ranks: its own segment's (sent first), the reduce-scatter's and the
 * all-gather's steps, and every chunk it receives, in order. Segment s (a contiguous 1/N of the
 * buffer) starts at rank s; its owner (rank s−1) divides it for a mean.
 */
const ringSchedule = (rank: number, size: number, chunkBytes: number, buffer: CollectiveBuffer, mean: boolean): RingSchedule => {
  const n = size;
  const bounds = (s: number): readonly [number, number] => segment(buffer.length, n, mod(s, n));
  const steps = (first: number, divisor: (k: number) => number | undefined): RingChunk[][] =>
    Array.from({ length: n - 1 }, (_, k) => chunkRanges(chunkBytes, buffer, bounds(first - k)).map(([a, b]) => ({ a, b, divisor: divisor(k) })));
  const reduceSteps = steps(rank - 1, (k) => (mean && k === n - 2 ? n : 1));
  const gatherSteps = steps(rank, () => undefined);
  return {
    elements: buffer.length,
    bytesPerElement: buffer.BYTES_PER_ELEMENT,
    mean,
    own: chunkRanges(chunkBytes, buffer, bounds(rank)),
    reduceSteps,
    gatherSteps,
    expected: [...reduceSteps.flat(), ...gatherSteps.flat()],
  };
};

/**
 * Keeps the last schedule of a rank: a training loop all-reduces a buffer of the same length at
 * every step, and the schedule depends on nothing else.
 */
export class ScheduleCache {
  private last: RingSchedule | undefined;

  constructor(
    private readonly rank: number,
    private readonly size: number,
    private readonly chunkBytes: number,
  ) {}

  /** This rank's schedule of a ring all-reduce of `buffer`'s length and element size (see {@link ringSchedule}). */
  get(buffer: CollectiveBuffer, mean: boolean): RingSchedule {
    const cached = this.last;
    if (cached !== undefined && cached.elements === buffer.length && cached.bytesPerElement === buffer.BYTES_PER_ELEMENT && cached.mean === mean) return cached;
    this.last = ringSchedule(this.rank, this.size, this.chunkBytes, buffer, mean);
    return this.last;
  }
}

/** `[start, end)` element ranges of at most `chunkBytes`; an empty range is one empty chunk (a frame still passes). */
const chunkRanges = (chunkBytes: number, buffer: CollectiveBuffer, [start, end]: readonly [number, number]): [number, number][] => {
  const per = chunkBytes / buffer.BYTES_PER_ELEMENT;
  const out: [number, number][] = [];
  for (let a = start; a < end; a += per) out.push([a, Math.min(end, a + per)]);
  return out.length === 0 ? [[start, start]] : out;
};

/** Segment `s` of `n` nearly equal contiguous segments of `length` elements. */
const segment = (length: number, n: number, s: number): readonly [number, number] => [Math.floor((s * length) / n), Math.floor(((s + 1) * length) / n)];

/** `a` modulo `n`, never negative. */
export const mod = (a: number, n: number): number => ((a % n) + n) % n;
