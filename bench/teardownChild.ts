/**
 * Child of the preemption benchmark: loads TensorFlow.js (compiled, or under tsx), then exits
 * at once, printing the wall time of its `exit` event. The parent's time of seeing the exit,
 * minus that, is Node's own teardown, which every preempted run pays after its last line of ours.
 */
await import("@tensorflow/tfjs");
process.on("exit", () => process.stdout.write(`${performance.timeOrigin + performance.now()}\n`));
process.exit(0);
