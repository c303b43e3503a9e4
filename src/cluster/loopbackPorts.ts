import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * Ports for a cluster's tasks on 127.0.0.1, chosen so that nothing else takes them before the
 * tasks bind them.
 *
 * A port from `listen(0)` comes from the kernel's ephemeral range, the same range every outgoing
 * connection's local port comes from. Released and handed to a task a moment later, it can already
 * be some client's socket: the task then fails with "address already in use" (torchrun's
 * `--master_port` users know the symptom). So the ports are drawn at random from below the
 * ephemeral range (Linux: `/proc/sys/net/ipv4/ip_local_port_range`, 32768 by default), where the
 * kernel never hands out a port by itself, and each is checked free by binding it.
 */
export const loopbackPorts = async (n: number, random: () => number = Math.random): Promise<number[]> => {
  const [low, high] = unassignedRange();
  const chosen = new Set<number>();
  // Every try binds a port; a busy machine has few busy ports below the ephemeral range.
  for (let tries = 0; chosen.size < n; tries++) {
    if (tries >= 50 * n + 100) {
      throw new Error(`could not find ${n} free port${n === 1 ? "" : "s"} on 127.0.0.1 between ${low} and ${high}; free some ports or give the tasks their addresses in TF_CONFIG`);
    }
    const port = low + Math.floor(random() * (high - low + 1));
    if (!chosen.has(port) && (await bindable(port))) chosen.add(port);
  }
  return [...chosen];
};

/** Of `ports`, those that cannot be bound on 127.0.0.1 now (taken since they were chosen). */
export const takenPorts = async (ports: readonly number[]): Promise<number[]> => {
  const taken: number[] = [];
  for (const port of ports) if (!(await bindable(port))) taken.push(port);
  return taken;
};

/** The lowest port of the kernel's ephemeral range (where `listen(0)` and outgoing connections draw from). */
const ephemeralLow = (): number => {
  try {
    const [low] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    if (low !== undefined && Number.isInteger(low) && low > 2048) return low;
  } catch {
    // Not Linux: the IANA range, which macOS and Windows use.
  }
  return process.platform === "linux" ? 32768 : 49152;
};

/** The range the ports are drawn from: above the well-known and common service ports, below the ephemeral range. */
const unassignedRange = (): readonly [number, number] => {
  const high = ephemeralLow() - 1;
  const low = Math.min(20000, Math.floor(high / 2));
  return [low, high];
};

const bindable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
