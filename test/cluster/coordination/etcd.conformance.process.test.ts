import { EtcdCoordinationClient } from "../../../src/cluster/coordination/index.js";
import { describeConformance } from "./conformance.js";
import { etcdBinary, etcdForFile } from "./etcdHarness.js";

const heartbeatTimeoutMs = 2_000;
const etcd = etcdForFile();

describeConformance(
  "etcd",
  () => {
    let n = 0;
    return {
      heartbeatTimeoutMs,
      cluster: async (tasks) => {
        const prefix = `conformance-${process.pid}-${n++}/`;
        return {
          client: (spec) =>
            new EtcdCoordinationClient({
              ...spec,
              tasks,
              hosts: [etcd().endpoint],
              prefix,
              timeouts: { heartbeatTimeoutMs, ...spec.timeouts },
            }),
        };
      },
      dispose: async () => {},
    };
  },
  etcdBinary === undefined,
);
