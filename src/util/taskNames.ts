/**
 * Task names as people read them. The coordination service names a task
 * `/job:worker/replica:0/task:1`; `launch`, the logs and the preemption agreement say `worker:1`.
 *
 * @module
 */

/** `worker:1` for the coordination service's `/job:worker/replica:0/task:1`; any other name as it is. */
export const shortTaskName = (coordinationName: string): string => {
  const m = /^\/job:([^/]+)\/replica:\d+\/task:(\d+)$/.exec(coordinationName);
  return m === null ? coordinationName : `${m[1] as string}:${m[2] as string}`;
};
