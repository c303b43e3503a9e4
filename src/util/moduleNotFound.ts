/**
 * Recognizing Node's error for a package that is not installed, so that an optional peer
 * dependency can be reported with its install command instead of a stack trace.
 *
 * @module
 */

/** Whether `e` is Node's "cannot find" error (ESM or CommonJS) for the package `name` itself. */
export const isModuleNotFound = (e: unknown, name: string): boolean => {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") return false;
  // ESM: "Cannot find package 'name' imported from ..."; CommonJS: "Cannot find module 'name'".
  const message = String((e as Error).message);
  return message.includes(`'${name}'`) || message.includes(`'${name}/`);
};
