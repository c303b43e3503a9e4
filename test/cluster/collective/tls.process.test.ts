/**
 * TcpCollective over `node:tls` with mutual TLS and the cluster token, with one certificate
 * (made by openssl at test time, for localhost and 127.0.0.1) that every rank presents both as
 * a server and as a client. A plaintext rank cannot join a TLS ring.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { TcpCollective, type TcpCollectiveOptions } from "../../../src/cluster/collective/TcpCollective.js";
import { DeadlineExceededError } from "../../../src/errors.js";
import type { Logger } from "../../../src/Logger.js";

const hasOpenssl = (() => {
  try {
    execFileSync("openssl", ["version"], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  }
})();
if (!hasOpenssl) console.warn("SKIP TLS tests of test/cluster/collective/tls.process.test.ts: no openssl on PATH (apt-get install openssl)");

const dir = hasOpenssl ? mkdtempSync(join(tmpdir(), "ms-collective-tls-")) : "";
afterAll(() => {
  if (dir !== "") rmSync(dir, { recursive: true, force: true });
});

/** A CA and one rank certificate it signed, valid for localhost and 127.0.0.1, for serving and dialing. */
const files = (() => {
  if (!hasOpenssl) return { certFile: "", keyFile: "", caFile: "" };
  const at = (name: string) => join(dir, name);
  const run = (args: string[]) => execFileSync("openssl", args, { stdio: "pipe" });
  const key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  run(["req", "-x509", ...key, "-days", "1", "-subj", "/CN=collective test CA", "-keyout", at("ca.key"), "-out", at("ca.pem")]);
  run(["req", ...key, "-subj", "/CN=localhost", "-keyout", at("rank.key"), "-out", at("rank.csr")]);
  writeFileSync(at("rank.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  run(["x509", "-req", "-days", "1", "-in", at("rank.csr"), "-CA", at("ca.pem"), "-CAkey", at("ca.key"), "-CAcreateserial", "-extfile", at("rank.ext"), "-out", at("rank.pem")]);
  return { certFile: at("rank.pem"), keyFile: at("rank.key"), caFile: at("ca.pem") };
})();

const quiet: Logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
const open: TcpCollective[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((c) => c.close()));
});
const make = (rank: number, options: Partial<TcpCollectiveOptions>): TcpCollective => {
  const c = new TcpCollective({ rank, addresses: ["127.0.0.1:0", "127.0.0.1:0"], logger: quiet, ...options });
  open.push(c);
  return c;
};

describe.skipIf(!hasOpenssl)("TcpCollective over TLS", () => {
  it("mutual TLS and the token: 2 ranks all-reduce and broadcast", async () => {
    const g = [0, 1].map((r) => make(r, { tls: files, token: "s3cret", chunkBytes: 1024 }));
    const addresses = await Promise.all(g.map((c) => c.listen()));
    await Promise.all(g.map((c) => c.connect(addresses)));
    const x = [new Float32Array(1000).fill(1.25), new Float32Array(1000).fill(2)];
    await Promise.all(g.map((c, r) => c.allReduce(x[r]!, "mean")));
    expect(x).toEqual([new Float32Array(1000).fill(1.625), new Float32Array(1000).fill(1.625)]);
    const y = [new Float64Array([1, 2, 3]), new Float64Array(3)];
    await Promise.all(g.map((c, r) => c.broadcast(y[r]!, 0)));
    expect(y[1]).toEqual(new Float64Array([1, 2, 3]));
  });

  it("a plaintext rank cannot join a TLS ring: its connect() times out naming the unreachable peer", async () => {
    const secure = make(1, { tls: files });
    const plain = make(0, { connectTimeoutSecs: 2 });
    const addresses = await Promise.all([plain.listen(), secure.listen()]);
    const e = await plain.connect(addresses).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(e).toBeInstanceOf(DeadlineExceededError);
    expect((e as Error).message).toContain("could not connect to rank 1 (/job:worker/replica:0/task:1)");
    expect(secure.stats().chunksReceived).toBe(0);
  });
});
