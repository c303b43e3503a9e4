/** A bare HTTP client for the board tests: exact request headers, raw response bytes (no fetch magic). */
import { request } from "node:http";
import { gunzipSync } from "node:zlib";

/** A response as it came. */
export interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  /** The body, gunzipped if it was gzipped. */
  readonly text: string;
  readonly gzipped: boolean;
}

/** Sends one request to `url` and reads the whole response. */
export const send = (url: string, options: { method?: string; headers?: Record<string, string>; body?: string | Buffer } = {}): Promise<Reply> =>
  new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? "GET", headers: options.headers ?? {}, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const raw = Buffer.concat(chunks);
        const gzipped = res.headers["content-encoding"] === "gzip";
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text: (gzipped ? gunzipSync(raw) : raw).toString("utf8"), gzipped });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });

/** A url-encoded form body. */
export const form = (fields: readonly (readonly [string, string])[]): { headers: Record<string, string>; body: string } => ({
  headers: { "Content-Type": "application/x-www-form-urlencoded" },
  body: new URLSearchParams(fields.map(([k, v]): [string, string] => [k, v])).toString(),
});
