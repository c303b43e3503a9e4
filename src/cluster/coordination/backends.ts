/**
 * The built-in coordination backends, registered: importing this module fills the registry
 * (backend.ts) with `embedded` (the default), `etcd` and `memory`. A backend of one's own is one
 * more `registerCoordinationBackend` call, in its own module.
 *
 * @module
 */

import { registerCoordinationBackend } from "./backend.js";
import { embeddedBackend } from "./embeddedBackend.js";
import { etcdBackend } from "./etcdBackend.js";
import { memoryBackend } from "./memory/memoryBackend.js";

for (const backend of [embeddedBackend, etcdBackend, memoryBackend]) registerCoordinationBackend(backend);

export * from "./backend.js";
