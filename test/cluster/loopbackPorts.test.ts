import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { describe, expect, it } from "vitest";
import { loopbackPorts, takenPorts } from "../../src/cluster/loopbackPorts.js";

const ephemeralLow = (): number => {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  } catch {
    return 49152;
  }
};

const listen = (port: number): Promise<Server> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(port, "127.0.0.1", () => resolve(s));
  });

describe("loopbackPorts (the addresses launch gives its tasks)", () => {
  it("gives distinct ports below the kernel's ephemeral range, each free to bind", async () => {
    const ports = await loopbackPorts(8);
    expect(new Set(ports).size).toBe(8);
    for (const p of ports) expect(p).toBeLessThan(ephemeralLow());
    const servers = await Promise.all(ports.map(listen));
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  });

  it("skips a port something holds", async () => {
    const [busy] = await loopbackPorts(1);
    const holder = await listen(busy as number);
    try {
      // The first draw lands on the held port; the next ones on others.
      let draws = 0;
      const low = Math.min(20000, Math.floor((ephemeralLow() - 1) / 2));
      const high = ephemeralLow() - 1;
      const at = ((busy as number) - low) / (high - low + 1);
      const ports = await loopbackPorts(1, () => (draws++ === 0 ? at + 1e-9 : Math.random()));
      expect(draws).toBeGreaterThan(1);
      expect(ports[0]).not.toBe(busy);
    } finally {
      await new Promise((r) => holder.close(r));
    }
  });

  it("names the problem and the fix when no port is free", async () => {
    const [busy] = await loopbackPorts(1);
    const holder = await listen(busy as number);
    try {
      const low = Math.min(20000, Math.floor((ephemeralLow() - 1) / 2));
      const at = ((busy as number) - low) / (ephemeralLow() - low);
      await expect(loopbackPorts(1, () => at + 1e-9)).rejects.toThrow(/could not find 1 free port on 127\.0\.0\.1 .*give the tasks their addresses in TF_CONFIG/);
    } finally {
      await new Promise((r) => holder.close(r));
    }
  });

  it("takenPorts: names the ports something took since they were chosen (launch then gives a restarted group new addresses)", async () => {
    const ports = await loopbackPorts(3);
    expect(await takenPorts(ports)).toEqual([]);
    const holder = await listen(ports[1] as number);
    try {
      expect(await takenPorts(ports)).toEqual([ports[1]]);
    } finally {
      await new Promise((r) => holder.close(r));
    }
    expect(await takenPorts(ports)).toEqual([]);
  });
});
