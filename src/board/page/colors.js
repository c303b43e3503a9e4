// Run colours: a run's colour comes from its name alone (a hash into the palette), so a run that
// appears later, or sorts before the others, never shifts the colours already on screen.
//
// A hash cannot keep every set of runs apart: two names land on one of PALETTE.length colours
// by chance (two runs: 1 in 10; five runs: about 70% that some pair shares one). Two rules make
// the usual cases distinct:
// - a trailing number is added to the stem's slot, so run1, run2 … run10 (seed_0, seed_1 …) take
//   consecutive colours: up to 10 numbered runs of one stem never share one;
// - the hash's seed is chosen so that the usual names take TensorBoard-like colours: train the
//   first (orange), eval / validation / val the second (blue), test the third (green), and the
//   logdir's own run "." another.

/** The colours, in order; the first is the board's own orange. */
export const PALETTE = ["#f57c00", "#1976d2", "#388e3c", "#d32f2f", "#7b1fa2", "#0097a7", "#5d4037", "#c2185b", "#455a64", "#afb42b"];

/** Picked by a search for the rules above (train → 0, eval/validation/val → 1, test → 2, "." apart). */
const SEED = 462233;

/** FNV-1a over the UTF-16 code units, then murmur3's final mix (FNV's low bits alone spread badly modulo 10). */
const hash = (s) => {
  let h = (0x811c9dc5 ^ SEED) >>> 0;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
};

/** The palette index of run `name`: the stem's hash plus its trailing number, modulo the palette. */
export const colorIndex = (name) => {
  const m = /^(.*?)(\d+)$/.exec(name);
  const stem = m === null ? name : m[1];
  let n = 0;
  // Digit by digit, so that a long number (a timestamp) does not lose precision.
  if (m !== null) for (const d of m[2]) n = (n * 10 + Number(d)) % PALETTE.length;
  return (hash(stem) + n) % PALETTE.length;
};

/** The colour of run `name`. */
export const runColor = (name) => PALETTE[colorIndex(name)];
