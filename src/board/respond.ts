/**
 * Writing the board's HTTP responses the way TensorBoard's `http_util.Respond` does: JSON is
 * `application/json` (no charset), other text types get `; charset=utf-8`, every response has
 * `X-Content-Type-Options: nosniff`, `Expires: 0` and `Cache-Control: no-cache, must-revalidate`,
 * text is gzipped when `Accept-Encoding` allows it, `HEAD` gets the headers only, and HTML gets a
 * Content-Security-Policy. Errors are {@link HttpError}s, answered as `text/plain` with
 * TensorBoard's message forms (`Invalid argument: …`, `Not found: …`).
 *
 * @module
 */

import type { IncomingMessage, ServerResponse } from "node:http";
import { promisify } from "node:util";
import { gzip } from "node:zlib";

// ---------------------------------------------------------------------------------------------
// model
// ---------------------------------------------------------------------------------------------

/** An error a route answers with: its status, a message for the client, extra headers. */
export class HttpError extends Error {
  override readonly name = "HttpError";
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }
}

/**
 * A response body with its type (`application/json`, `text/csv`, `text/html`, `text/plain`), or
 * bytes (an image, a file to download): bytes get no charset, and images are not gzipped.
 */
export interface Body {
  readonly status?: number;
  readonly contentType: string;
  readonly body: string | Uint8Array;
  readonly headers?: Readonly<Record<string, string>>;
  /** The body gzipped, when it is kept already (an answer from memory): sent as is. */
  readonly gzipped?: () => Promise<Buffer>;
}

// ---------------------------------------------------------------------------------------------
// constructors
// ---------------------------------------------------------------------------------------------

/** TensorBoard's 400: `Invalid argument: <details>`. */
export const invalidArgument = (details: string): HttpError => new HttpError(400, `Invalid argument: ${details}`);

/** TensorBoard's 404: `Not found`, or `Not found: <details>`. */
export const notFound = (details?: string): HttpError => new HttpError(404, details === undefined ? "Not found" : `Not found: ${details}`);

/**
 * The Content-Security-Policy of every HTML page: only the board's own scripts, styles and
 * images (and inline styles), no plugins, no framing, no form posts elsewhere.
 */
const CONTENT_SECURITY_POLICY =
  "default-src 'self'; base-uri 'self'; object-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'none'";

// ---------------------------------------------------------------------------------------------
// operations
// ---------------------------------------------------------------------------------------------

/** Sends `body` on `res`, gzipped if the request accepts it. */
export const respond = async (req: IncomingMessage, res: ServerResponse, body: Body): Promise<void> => {
  const mimetype = body.contentType.split(";")[0]?.trim() ?? "";
  const text = typeof body.body === "string";
  const contentType = !text || mimetype === "application/json" || body.contentType.includes("charset=") ? body.contentType : `${body.contentType}; charset=utf-8`;
  let bytes: Buffer = typeof body.body === "string" ? Buffer.from(body.body, "utf8") : Buffer.from(body.body.buffer, body.body.byteOffset, body.body.byteLength);
  const headers: Record<string, string> = {
    "Content-Type": contentType,
    "X-Content-Type-Options": "nosniff",
    Expires: "0",
    "Cache-Control": "no-cache, must-revalidate",
    Vary: "Accept-Encoding",
    ...body.headers,
  };
  if (mimetype === "text/html") headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY;
  // Images are compressed already.
  if (acceptsGzip(req.headers["accept-encoding"]) && !mimetype.startsWith("image/")) {
    // Off the main thread (zlib's pool). Level 1, not TensorBoard's 3: 100,000 points (4.4 MB of
    // JSON) take about 37 ms instead of 48-62 ms here, for 1% more bytes; a client cannot tell.
    bytes = body.gzipped === undefined ? await gzipBody(bytes) : await body.gzipped();
    headers["Content-Encoding"] = "gzip";
  }
  headers["Content-Length"] = String(bytes.length);
  res.writeHead(body.status ?? 200, headers);
  res.end(req.method === "HEAD" ? undefined : bytes);
};

/** Sends `e` as TensorBoard sends a public error: `text/plain`, its message, its status. */
export const respondError = (req: IncomingMessage, res: ServerResponse, e: HttpError): Promise<void> =>
  respond(req, res, { status: e.status, contentType: "text/plain", body: e.message, headers: e.headers });

// ---------------------------------------------------------------------------------------------
// utils
// ---------------------------------------------------------------------------------------------

const gzipAsync = promisify(gzip);

/** Gzips a text body as every answer is gzipped (see {@link respond}). */
export const gzipBody = (bytes: Uint8Array): Promise<Buffer> => gzipAsync(bytes, { level: 1 });

/** TensorBoard's rule: `gzip`, `x-gzip` or `*`, unless followed by `;q=0`. */
const GZIP_ALLOWED = /(?:^|,|\s)(?:(?:x-)?gzip|\*)(?!;q=0)(?:\s|,|$)/;

const acceptsGzip = (header: string | string[] | undefined): boolean => GZIP_ALLOWED.test(Array.isArray(header) ? header.join(",") : (header ?? ""));
