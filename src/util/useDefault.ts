/**
 * TensorFlow's `USE_DEFAULT` marker: an option given as `USE_DEFAULT` (or absent) takes its
 * default, one given as `null` is disabled. `Supervisor` and `monitoredTrainingSession` share it.
 *
 * @module
 */

/** "Use the default" for an option (TensorFlow's `Supervisor.USE_DEFAULT`). */
export const USE_DEFAULT: unique symbol = Symbol("USE_DEFAULT");

/** An option that can take its default ({@link USE_DEFAULT} or absent) or be disabled (`null`). */
export type Defaultable<T> = T | typeof USE_DEFAULT | null | undefined;
