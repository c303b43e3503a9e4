/**
 * For a test file of the board's page in Debian's Chromium: the browser (launched once per file
 * when /usr/bin/chromium is here), temporary logdirs and cleanups after each test, and `open`, a
 * board on a logdir with a page on it that collects its errors and the paths it requests.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll } from "vitest";

import { type Board, type BoardOptions, startBoard } from "../../src/board/BoardServer.js";
import { haveChromium, launchChromium } from "../util/chromium.js";
import { useTempDirs } from "../util/tempDirs.js";

/** A board and a page on it. */
export interface OpenedBoard {
  readonly board: Board;
  readonly page: Page;
  /** Console errors and uncaught page errors. */
  readonly errors: string[];
  /** The path of every request the page made, in order (as Chromium sent them). */
  readonly requests: string[];
}

/** What {@link useBoardPages} gives a test file. */
export interface BoardPages {
  /** A new temporary directory, removed after the test. */
  readonly tempDir: () => string;
  /** A board on `dir` (already loaded), and a page navigated to it. */
  readonly open: (dir: string, options?: BoardOptions) => Promise<OpenedBoard>;
  /** The browser, for a page of the test's own. */
  readonly browser: () => Browser;
  /** Runs `fn` after the test (in the reverse order of registration). */
  readonly afterTest: (fn: () => Promise<void> | void) => void;
}

/** Registers the hooks of a test file of the board's page. */
export const useBoardPages = (prefix: string): BoardPages => {
  const tempDir = useTempDirs(prefix);
  const cleanups: (() => Promise<void> | void)[] = [];
  let browser: Browser | undefined;
  beforeAll(async () => {
    if (haveChromium) browser = await launchChromium();
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  afterAll(async () => {
    await browser?.close();
  });
  const theBrowser = (): Browser => {
    if (browser === undefined) throw new Error("no chromium: the test should have been skipped");
    return browser;
  };
  const open = async (dir: string, options: BoardOptions = {}): Promise<OpenedBoard> => {
    const board = await startBoard(dir, { port: 0, pollSecs: 0.05, ...options });
    cleanups.push(() => board.close());
    await board.store.loaded;
    const page = await theBrowser().newPage({ viewport: { width: 1400, height: 900 } });
    cleanups.push(() => page.close());
    const errors: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    page.on("pageerror", (e) => errors.push(e.message));
    const requests: string[] = [];
    page.on("request", (r) => requests.push(new URL(r.url()).pathname));
    await page.goto(board.url);
    return { board, page, errors, requests };
  };
  return { tempDir, open, browser: theBrowser, afterTest: (fn) => void cleanups.push(fn) };
};
