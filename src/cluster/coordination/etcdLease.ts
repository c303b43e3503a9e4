/**
 * What the etcd backend's liveness leases allow: the least heartbeat timeout, and a lease's TTL
 * for a timeout. Shared by its registration (etcdBackend.ts) and its client.
 *
 * @module
 */

import type { HeartbeatFloor } from "./CoordinationConfig.js";

/** etcd leases have a whole-second TTL, and its client reports a lost lease late: 2 s at least. */
export const ETCD_MIN_HEARTBEAT_TIMEOUT_MS = 2_000;

/** The etcd backend's least heartbeat timeout. */
export const ETCD_HEARTBEAT_FLOOR: HeartbeatFloor = { minHeartbeatTimeoutMs: ETCD_MIN_HEARTBEAT_TIMEOUT_MS, why: "etcd leases are whole seconds" };

/** etcd's lease TTL for a heartbeat timeout: whole seconds, rounded up. */
export const etcdLeaseTtlSecs = (heartbeatTimeoutMs: number): number => Math.ceil(heartbeatTimeoutMs / 1000);
