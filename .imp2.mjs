const lap = async (what) => { const t = performance.now(); await import(what); console.log(what, Math.round(performance.now() - t), "ms"); };
for (const m of process.argv.slice(2)) await lap(m);
