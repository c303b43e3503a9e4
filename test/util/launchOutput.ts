/**
 * Reading `monitored-session launch`'s own lines (`[launch] ...`) in a test: the pid it started a
 * task with, and each task's exit code as it reported it.
 */

/** The pid `launch` printed for `task` (the last start, after a restart: a group's, from a standby, or alone). */
export const pidOf = (output: string, task: string): number => {
  const pids = [...output.matchAll(new RegExp(`^\\[launch\\] started ${task} at \\S+ \\(pid (\\d+)(?:, [^)]*)?\\)$`, "gm"))];
  const last = pids.at(-1);
  if (last === undefined) throw new Error(`no pid for ${task} in:\n${output}`);
  return Number(last[1]);
};

/** Each task's exit code as `launch` reported it (the last exit of each). */
export const exitsOf = (output: string): Record<string, number> =>
  Object.fromEntries([...output.matchAll(/^\[launch\] (\S+) exited with (\d+)/gm)].map((m) => [m[1] as string, Number(m[2])]));
