/**
 * The coordination service over gRPC, in one process on loopback: what the wire carries (an
 * independent grpc-js client with our .proto loaded at run time), and how the client side maps
 * what it gets (a server's status, or no answer at all).
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { connectCoordinationService, hostCoordinationService, taskName } from "../../../src/cluster/coordination/index.js";
import { makeCertificates, opensslVersion } from "../../util/tlsCertificates.js";
import { within } from "./conformance.js";
import { chief, clients, hosts, quiet } from "./grpcCoordination.testHelpers.js";

const certDir = opensslVersion === undefined ? "" : mkdtempSync(join(tmpdir(), "ms-coord-tls-"));
afterAll(() => {
  if (certDir !== "") rmSync(certDir, { recursive: true, force: true });
});

describe.skipIf(opensslVersion === undefined)("the coordination service over mutual TLS with a token", () => {
  it("heartbeats from their own channel carry the token and the client certificate: nobody is declared failed", async () => {
    const { f } = makeCertificates(certDir);
    const heartbeatTimeoutMs = 2_000;
    const token = "the-cluster-token";
    const h = await hostCoordinationService(
      { chief: ["localhost:0"] },
      { logger: quiet, stopGraceMs: 100, token, tls: { certFile: f("server.pem"), keyFile: f("server.key"), caFile: f("ca.pem") }, coordination: { heartbeatTimeoutMs } },
    );
    hosts.push(h);
    const worker = taskName("worker", 0);
    const tasks = [chief, worker];
    const timeouts = { heartbeatTimeoutMs };
    const c = h.client({ task: chief, tasks, isChief: true, timeouts });
    const w = connectCoordinationService(
      h.server.target,
      { task: worker, tasks, isChief: false, timeouts },
      { token, tls: { caFile: f("ca.pem"), certFile: f("client.pem"), keyFile: f("client.key") } },
    );
    clients.push(c, w);
    await within(Promise.all([c.connect(), w.connect()]), 20_000, "registration");
    await new Promise((r) => setTimeout(r, 2 * heartbeatTimeoutMs)); // heartbeats alone keep the worker alive
    await c.insert("still", "alive");
    expect(await w.tryGet("still")).toBe("alive");
  });
});
