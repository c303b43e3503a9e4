/**
 * A bounded wait for a promise that may never settle (a peer's answer, a cluster's failure).
 *
 * @module
 */

import type { Clock } from "./Clock.js";

/** Resolves once `p` settles, or after `ms` on `clock`, whichever comes first (never rejects). */
export const settledWithin = async (p: Promise<unknown>, ms: number, clock: Clock): Promise<void> => {
  let timer: { cancel(): void } | undefined;
  await Promise.race([p.then(() => undefined, () => undefined), new Promise<void>((ok) => (timer = clock.setTimer(ms, ok)))]);
  timer?.cancel();
};
