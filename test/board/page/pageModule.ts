/**
 * A module of the board's page (plain ES modules without types, src/board/page/), imported from
 * Node as the browser imports it, typed by the test that uses it.
 */
export const pageModule = <T>(name: string): Promise<T> => import(new URL(`../../../src/board/page/${name}`, import.meta.url).href) as Promise<T>;
