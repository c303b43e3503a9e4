/**
 * Debian's chromium for the browser tests: whether it is here, a visible message when a test file
 * skips without it (under CI a missing browser is a failure instead: .ci/run installs it), and
 * headless launching with the flags this machine needs.
 */
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";
import { expect, it } from "vitest";

export const CHROMIUM = "/usr/bin/chromium";
export const haveChromium = existsSync(CHROMIUM);

/**
 * Says, once per test file, that `what` is skipped locally without chromium; under CI adds a test
 * that fails when chromium is missing.
 */
export const requireChromiumUnderCi = (what: string): void => {
  if (!haveChromium && process.env.CI === undefined) console.warn(`${what} SKIPPED: no ${CHROMIUM} (apt-get install chromium; under CI they fail instead)`);
  it.runIf(process.env.CI !== undefined)(`CI: Debian's chromium is installed for ${what} (.ci/run installs it)`, () => {
    expect(haveChromium, `${CHROMIUM} is missing`).toBe(true);
  });
};

/** Headless chromium, no sandbox (root in a container), no GPU, no network of its own. */
export const launchChromium = (): Promise<Browser> =>
  chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
