/**
 * AWS EC2 spot: the two-minute interruption notice, published only as the instance metadata
 * item `spot/instance-action` (`{"action": "terminate" | "stop" | "hibernate", "time": ISO 8601}`;
 * 404 while there is none). Read through IMDSv2: a session token is `PUT` first and sent with
 * each read; it is renewed before it expires, and at once when the service rejects it (401).
 *
 * @module
 */

import * as E from "fp-ts/lib/Either.js";
import { pipe } from "fp-ts/lib/function.js";
import * as t from "io-ts";

import { systemClock, type Clock } from "../../time/Clock.js";
import { decodeLines, JsonText, refined } from "../../codec.js";
import { ValueError } from "../../errors.js";
import { joinUrl, malformed, metadataRequest, unexpectedStatus, type MetadataServiceOptions } from "./metadataHttp.js";
import type { PlatformNotice, PlatformWatcher } from "./PlatformWatcher.js";

/** Options of {@link awsWatcher}. */
export interface AwsWatcherOptions extends MetadataServiceOptions {
  /** The IMDSv2 token's lifetime in seconds (1 to 21600; default 21600, six hours). */
  readonly tokenTtlSecs?: number | undefined;
  readonly clock?: Clock | undefined;
}

/** The instance metadata service's address (`AWS_EC2_METADATA_SERVICE_ENDPOINT` overrides it). */
export const AWS_METADATA_URL = "http://169.254.169.254";

/** The `spot/instance-action` document; other fields are AWS's to add. */
const InstanceAction = JsonText.pipe(
  t.type({
    action: t.keyof({ terminate: null, stop: null, hibernate: null }, '"terminate", "stop" or "hibernate"'),
    time: refined("an ISO 8601 time", (u): u is string => typeof u === "string" && !Number.isNaN(Date.parse(u))),
  }),
  "spot/instance-action",
);

/** The AWS spot watcher. */
export const awsWatcher = (options: AwsWatcherOptions = {}): PlatformWatcher => {
  const base = options.baseUrl ?? AWS_METADATA_URL;
  const clock = options.clock ?? systemClock;
  const ttl = options.tokenTtlSecs ?? 21600;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > 21600) throw new ValueError(`awsWatcher: tokenTtlSecs must be an integer from 1 to 21600, got ${String(ttl)}`);
  // Renewed a little before it expires, so a read never carries a token that lapses on the way.
  const marginMs = Math.min(60_000, ttl * 100);
  let token: { value: string; renewAtMs: number } | undefined;

  const fetchToken = async (signal: AbortSignal): Promise<string> => {
    const a = await metadataRequest(options.fetch, joinUrl(base, "latest/api/token"), { method: "PUT", headers: { "X-aws-ec2-metadata-token-ttl-seconds": String(ttl) } }, signal);
    if (a.status !== 200) throw unexpectedStatus("the IMDSv2 token request", a);
    const value = a.body.trim();
    if (value === "" || /\s/.test(value)) throw malformed("the IMDSv2 token request", a.body);
    token = { value, renewAtMs: clock.now() + ttl * 1000 - marginMs };
    return value;
  };
  const currentToken = (signal: AbortSignal): Promise<string> =>
    token !== undefined && clock.now() < token.renewAtMs ? Promise.resolve(token.value) : fetchToken(signal);
  const readAction = async (sessionToken: string, signal: AbortSignal) =>
    metadataRequest(options.fetch, joinUrl(base, "latest/meta-data/spot/instance-action"), { headers: { "X-aws-ec2-metadata-token": sessionToken } }, signal);

  return {
    platform: "aws",
    check: async (signal): Promise<PlatformNotice | undefined> => {
      let a = await readAction(await currentToken(signal), signal);
      if (a.status === 401) {
        // The token expired or was revoked (an instance restart, a clock jump): one new one, one retry.
        token = undefined;
        a = await readAction(await fetchToken(signal), signal);
      }
      if (a.status === 404) return undefined;
      if (a.status !== 200) throw unexpectedStatus("spot/instance-action", a);
      const body = a.body;
      return pipe(
        decodeLines(InstanceAction, body),
        E.match(
          (problems) => {
            throw malformed(`spot/instance-action (${problems.join("; ")})`, body);
          },
          ({ action, time }): PlatformNotice => ({ platform: "aws", detail: `spot instance-action "${action}" at ${time}`, deadlineMs: Date.parse(time) }),
        ),
      );
    },
  };
};
