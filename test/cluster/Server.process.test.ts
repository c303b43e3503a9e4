/**
 * The Server on loopback, called by an independent gRPC client: @grpc/grpc-js with
 * @grpc/proto-loader loading our .proto at run time (the server is connect-node), so what we
 * serve is gRPC that any implementation speaks.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { afterAll, describe, expect, it } from "vitest";
import { getServerStatus } from "../../src/cluster/clusterClient.js";
import { Server } from "../../src/cluster/Server.js";
import { InvalidArgumentError, UnavailableError } from "../../src/errors.js";
import { makeCertificates, opensslVersion } from "../util/tlsCertificates.js";
import { CALL_DEADLINE_MS, clientFor, getStatus, local, quiet } from "./Server.testHelpers.js";

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

const certDir = opensslVersion === undefined ? "" : mkdtempSync(join(tmpdir(), "ms-tls-"));
afterAll(() => {
  if (certDir !== "") rmSync(certDir, { recursive: true, force: true });
});

describe.skipIf(opensslVersion === undefined)("TLS from certificate files", () => {
  const certs = opensslVersion === undefined ? undefined : makeCertificates(certDir);

  it("serves TLS: a client trusting the CA gets through; a plaintext client does not", async () => {
    const { f, read } = certs!;
    const server = await local({ tls: { certFile: f("server.pem"), keyFile: f("server.key") } });
    expect((await getStatus(clientFor(server.target, grpc.credentials.createSsl(read("ca.pem"))))).taskIndex).toBe(0);
    await expect(getStatus(clientFor(server.target))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("with caFile: mutual TLS, a client without a certificate is refused; token and TLS together", async () => {
    const { f, read } = certs!;
    const server = await local({ tls: { certFile: f("server.pem"), keyFile: f("server.key"), caFile: f("ca.pem") }, token: "t0k" });
    const withCert = clientFor(server.target, grpc.credentials.createSsl(read("ca.pem"), read("client.key"), read("client.pem")));
    expect((await getStatus(withCert, "t0k")).taskIndex).toBe(0);
    await expect(getStatus(withCert)).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
    await expect(getStatus(clientFor(server.target, grpc.credentials.createSsl(read("ca.pem"))), "t0k")).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
    });
  });

  it("our client over TLS and mutual TLS", async () => {
    const { f } = certs!;
    const server = await local({ tls: { certFile: f("server.pem"), keyFile: f("server.key"), caFile: f("ca.pem") } });
    const status = await getServerStatus(server.target, { tls: { caFile: f("ca.pem"), certFile: f("client.pem"), keyFile: f("client.key") }, timeoutMs: CALL_DEADLINE_MS });
    expect(status.jobName).toBe("localhost");
    const refused = await getServerStatus(server.target, { tls: { caFile: f("ca.pem") }, timeoutMs: CALL_DEADLINE_MS }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(UnavailableError);
    expect((refused as Error).message).toMatch(/: TLS handshake failed \(ERR_SSL_\w+\); check the CA/);
    await expect(getServerStatus(server.target, { tls: { caFile: f("ca.pem"), certFile: f("client.pem") } })).rejects.toThrow(
      new InvalidArgumentError("TLS: give both certFile and keyFile (a client certificate), or neither"),
    );
  });

  it("a missing certificate file: one line naming it", async () => {
    const server = new Server({ local: ["localhost:0"] }, { start: false, tls: { certFile: join(certDir, "nope.pem"), keyFile: join(certDir, "server.key") }, logger: quiet() });
    await expect(server.start()).rejects.toThrow(new InvalidArgumentError(`cannot read the TLS certificate file (certFile) ${join(certDir, "nope.pem")}: ENOENT`));
  });
});
