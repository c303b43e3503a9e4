/**
 * Whether a monitored session measures its hooks (the `hookTimings` event): on when the
 * session was created with `hookTiming: true`, or while at least one hook holds a request made
 * through `HookEnv.requestHookTiming()`. The run pipeline reads {@link HookTimingSwitch.on}
 * once per run; nothing else is paid while it is off.
 *
 * @module
 */

export class HookTimingSwitch {
  private requests = 0;
  /** Read once per run by the hooked layer. */
  on: boolean;

  constructor(private readonly always: boolean) {
    this.on = always;
  }

  /** Turns timing on until the returned function is called (calling it again does nothing). */
  request(): () => void {
    this.requests++;
    this.on = true;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.requests--;
      this.on = this.always || this.requests > 0;
    };
  }
}
