/**
 * How a task started by `monitored-session launch` tells `launch` that it handles termination
 * signals. Until a task's Node has run the first lines of the command, a SIGTERM would kill it
 * with Node's default action (exit 143, no notice, no restart); so `launch` holds a signal it
 * forwards until the task's stderr carries {@link LAUNCH_READY_LINE}, which the task writes
 * right after installing its early handlers when {@link LAUNCH_READY_ENV} is `1`. `launch`
 * removes the line from the task's output. Kept tiny: the command's entry point imports it
 * before anything else.
 *
 * @module
 */

/** Set to `1` in a task's environment by `launch`. */
export const LAUNCH_READY_ENV = "MONITORED_SESSION_LAUNCH_READY";

/** The line a task writes to stderr once its signal handlers are installed. */
export const LAUNCH_READY_LINE = "monitored-session: signal handlers ready (read by launch)";
