/**
 * The partition scenario with the kernel's network instead of our proxy: worker 1 runs in its own
 * network namespace, joined to the host by a veth pair with private addresses that exist only on
 * this machine (10.213.N.1 host side, 10.213.N.2 in the namespace); the chief listens on the host
 * side. Taking the host's end of the link down cuts worker 1 off. The chief and worker 0 name
 * it, as for a kill; worker 1's own calls fail with EHOSTUNREACH (nobody answers its ARP), naming
 * the chief's address.
 *
 * Needs `ip netns add` (root, or CAP_NET_ADMIN, and iproute2); elsewhere it skips with a message.
 */

import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { failBound, start, startBound, worker1 } from "./taskProcesses.js";

const id = process.pid % 10_000;
const netns = `ms-part-${id}`;
const hostEnd = `msh${id}`;
const nsEnd = `msn${id}`;
const ip = (...args: string[]): string =>
  execFileSync("ip", args, { stdio: ["ignore", "pipe", "pipe"], timeout: 10_000 }).toString();
const inNs = (...args: string[]): string => ip("netns", "exec", netns, "ip", ...args);

/** Why this machine cannot run the test, or undefined when it can. */
const unsupported = ((): string | undefined => {
  try {
    // A name of its own: re-adding a name just deleted can leave `ip netns exec` in the old one.
    ip("netns", "add", `${netns}-probe`);
    ip("netns", "del", `${netns}-probe`);
    return undefined;
  } catch (e) {
    return (e as { stderr?: Buffer }).stderr?.toString().trim() || (e as Error).message;
  }
})();

if (unsupported !== undefined) {
  console.warn(`SKIP network-namespace partition test: \`ip netns add\` does not work here (${unsupported}); the proxy variant in partition.process.test.ts covers the scenario`);
}

/** A 10.213.N.0/30 that no route of this host uses (another run's veth may still exist). */
const freeSubnet = (): string => {
  const routes = ip("-4", "route");
  for (let n = process.pid % 250; ; n = (n + 1) % 250) {
    if (!routes.includes(`10.213.${n}.`)) return `10.213.${n}`;
  }
};

describe.skipIf(unsupported !== undefined)("a network partition of the embedded coordination service (network namespace)", () => {
  let subnet = "";

  beforeAll(() => {
    subnet = freeSubnet();
    ip("netns", "add", netns);
    ip("link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd, "netns", netns);
    ip("addr", "add", `${subnet}.1/30`, "dev", hostEnd);
    ip("link", "set", hostEnd, "up");
    inNs("addr", "add", `${subnet}.2/30`, "dev", nsEnd);
    inNs("link", "set", "lo", "up");
    inNs("link", "set", nsEnd, "up");
    const flags = inNs("-o", "link", "show", nsEnd);
    if (!/[<,]UP[,>]/.test(flags)) throw new Error(`the namespace's end of the veth pair is not up: ${flags}`);
  });

  afterAll(() => {
    // Deleting one end of a veth pair deletes both, even if a process still holds the namespace.
    ip("link", "del", hostEnd);
    ip("netns", "del", netns);
  });

  it("the link down: the others name the cut-off worker; it learns from its own calls that the chief is unreachable", async () => {
    const c = start({ role: "chief", index: 0, scenario: "block", host: `${subnet}.1` });
    const target = String((await c.next("serving", startBound)).target);
    const w0 = start({ role: "worker", index: 0, target, scenario: "block" });
    const w1 = start({ role: "worker", index: 1, target, scenario: "block" }, ["ip", "netns", "exec", netns]);
    await Promise.all([w1, w0, c].map((t) => t.next("connected", startBound)));
    ip("link", "set", hostEnd, "down");
    for (const t of [c, w0]) {
      const e = await t.next("error", failBound);
      expect(e.name).toBe("UnavailableError");
      expect(e.message).toContain(worker1);
      expect(e.message).toContain("declared failed");
    }
    // Unlike the proxy's blackhole, the kernel answers the cut-off side's new connections with
    // EHOSTUNREACH (no neighbour answers ARP), so worker 1's own calls fail, naming the chief.
    const own = await w1.next("error", failBound);
    expect(own.name).toBe("UnavailableError");
    expect(own.message).toContain(target);
  });
});
