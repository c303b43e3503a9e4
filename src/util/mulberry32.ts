/**
 * A seeded random number generator whose whole state is one uint32, so that it can be saved in a
 * checkpoint and resumed bit-exactly, and a run repeated from its printed seed: the in-memory data
 * source's shuffle, `launch --chaos`'s draw of faults, the benchmarks' random moments.
 *
 * The algorithm is mulberry32 (public domain, Tommy Ettinger): statistically fine for these, a
 * period of 2^32, and trivially serializable. Hand-written because the state must be exposed as a
 * number; seedrandom's `state()` objects differ per algorithm and are not a declared dependency
 * of this package.
 *
 * @module
 */

/** A mulberry32 generator. `state` is a uint32 (0 ≤ state < 2^32) that fully determines the sequence. */
export class Mulberry32 {
  constructor(public state: number) {
    this.state = state >>> 0;
  }

  /** A float in [0, 1). Advances the state. */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [0, n). */
  nextInt(n: number): number {
    return Math.floor(this.next() * n);
  }
}

/** A function that returns the next float in [0, 1) of a {@link Mulberry32} seeded with `seed`. */
export const mulberry32 = (seed: number): (() => number) => {
  const generator = new Mulberry32(seed);
  return () => generator.next();
};
