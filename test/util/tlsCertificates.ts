/**
 * TLS test certificates made at test time by openssl: a CA, a server certificate for
 * localhost/127.0.0.1 and a client certificate, both signed by the CA.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** openssl's version, or `undefined` when it is not on PATH (TLS tests then skip). */
export const opensslVersion: string | undefined = (() => {
  try {
    return execFileSync("openssl", ["version"], { encoding: "utf8" }).trim();
  } catch {
    return undefined;
  }
})();

/** Writes `ca.pem`, `server.pem`/`server.key` and `client.pem`/`client.key` into `dir`. */
export const makeCertificates = (dir: string): { f: (name: string) => string; read: (name: string) => Buffer } => {
  const f = (name: string): string => join(dir, name);
  const ssl = (...args: string[]): Buffer => execFileSync("openssl", args, { stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  ssl("req", "-x509", ...ec, "-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "1", "-subj", "/CN=monitored-session test CA");
  writeFileSync(f("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  writeFileSync(f("client.ext"), "extendedKeyUsage=clientAuth\n");
  for (const who of ["server", "client"]) {
    ssl("req", ...ec, "-keyout", f(`${who}.key`), "-out", f(`${who}.csr`), "-subj", `/CN=${who === "server" ? "localhost" : "worker"}`);
    ssl("x509", "-req", "-in", f(`${who}.csr`), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-out", f(`${who}.pem`), "-days", "1", "-extfile", f(`${who}.ext`));
  }
  return { f, read: (name: string) => readFileSync(f(name)) };
};
