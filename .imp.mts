const t0 = performance.now();
const lap = (what: string, t: number) => console.log(what, Math.round(performance.now() - t), "ms");
let t = performance.now(); await import("@tensorflow/tfjs"); lap("tfjs", t);
t = performance.now(); await import("@tensorflow/tfjs-backend-wasm"); lap("tfjs-backend-wasm", t);
t = performance.now(); await import("@grpc/grpc-js"); lap("grpc-js", t);
t = performance.now(); await import("/work/main/src/cli/run.ts"); lap("run.ts", t);
t = performance.now(); await import("/work/main/src/cli/clusterJoin.ts"); lap("clusterJoin.ts", t);
t = performance.now(); await import("/work/main/examples/tfjs-classifier.job.ts"); lap("job", t);
lap("total", t0);
