// The HTTP side of the API (SPEC §3, §11, §12) and the watch socket.
import http from "node:http";
import https from "node:https";
import WebSocket from "ws";

import { TaskhosterError, type Violation } from "./errors.js";
import type { Ack, BatchOptions, Posted, PostOptions, View } from "./types.js";

/** How a Client reaches the server. */
export interface ClientOptions {
  /**
   * The Host header to send, which picks the host folder on the server
   * (default: the server URL's host). Sent on the WebSockets too.
   */
  host?: string;
  /** Sent as "Authorization: Bearer <token>" on every request. */
  token?: string;
}

/** What every call may take: a signal that gives the call up. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** How long a WebSocket opening handshake may take. */
const handshakeTimeoutMs = 30_000;
/** How long a socket waits for the peer's close frame once it has what it needs. */
export const closeWaitMs = 5_000;
/**
 * How often a watch pings the server, and how long it may stay silent (no
 * view, ping or pong) before it counts as dropped: the worker socket's
 * timings. Without them a watch whose server vanished (lost power, a
 * connection a NAT forgot) would wait for its next view forever.
 * @internal mutable for tests.
 */
export const watchTiming = { pingMs: 15_000, silenceMs: 45_000 };
/** Bounds how much of an error answer is read: any list of violations, not a runaway proxy page. */
const maxErrorBody = 1 << 20;

/**
 * One server (and one host on it) seen with one token. Every method that
 * talks to the server rejects with a TaskhosterError when the server
 * answers with an error, and with the network's error when it cannot be
 * reached.
 */
export class Client {
  /** The server's origin and path prefix, without a trailing slash. */
  readonly #base: string;
  readonly #host: string | undefined;
  readonly #token: string | undefined;

  /** @param server the server's URL, http or https, e.g. "http://127.0.0.1:8080". */
  constructor(server: string, opts: ClientOptions = {}) {
    const base = new URL(server); // throws a TypeError for a malformed URL
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new TypeError(`server URL ${JSON.stringify(server)}: the scheme must be http or https`);
    }
    this.#base = base.origin + base.pathname.replace(/\/+$/, "");
    this.#host = opts.host;
    this.#token = opts.token;
  }

  /**
   * Posts item (any value JSON.stringify takes) to queue. Resolves once the
   * server has stored the task durably. Options delay it, give it a priority
   * or an idempotency key (then created says whether this post made the task).
   */
  async post(queue: string, item: unknown, opts: PostOptions & CallOptions = {}): Promise<Posted> {
    const headers: Record<string, string> = {};
    if (opts.key !== undefined) headers["idempotency-key"] = opts.key;
    const { status, body } = await this.#request("POST", queuePath(queue) + postQuery(opts), {
      body: item,
      headers,
      signal: opts.signal,
    });
    const posted = body as { id: string; status: Posted["status"] };
    return { id: posted.id, status: posted.status, created: status === 201 };
  }

  /**
   * Posts every item (1 to 1000) in one request and resolves to the new
   * tasks' ids in order. All or nothing: one bad item is a 422 invalid_item
   * whose violation paths name it (/items/3/width), and nothing is posted.
   */
  async postBatch(queue: string, items: readonly unknown[], opts: BatchOptions & CallOptions = {}): Promise<string[]> {
    if (!Array.isArray(items)) throw new TypeError("postBatch: items must be an array");
    const { body } = await this.#request("POST", queuePath(queue) + "/batch" + postQuery(opts), {
      body: { items },
      signal: opts.signal,
    });
    return (body as { ids: string[] }).ids;
  }

  /**
   * The task's status view. Reading a finished or failed task for the first
   * time marks it fetched, which may start its retention.
   */
  async status(queue: string, id: string, opts: CallOptions = {}): Promise<View> {
    const { body } = await this.#request("GET", taskPath(queue, id), { signal: opts.signal });
    return body as View;
  }

  /**
   * Cancels the task: a pending or processing one goes to failed with error
   * "cancelled" ({accepted: true, status: "failed"}); a finished or failed
   * one is left as it is (accepted false, with its status). A worker holding
   * it on the socket is told at once. Needs manage access, or post access
   * for the user who posted it.
   */
  async cancel(queue: string, id: string, opts: CallOptions = {}): Promise<Ack> {
    const { body } = await this.#request("DELETE", taskPath(queue, id), { signal: opts.signal });
    return body as Ack;
  }

  /**
   * The task's status views as the watch socket sends them: the current one
   * at once, then one per change, ending after the terminal view (which
   * counts as a fetch). A refused handshake (401, 404, ...) rejects the
   * first next() with a TaskhosterError; a socket that ends before a
   * terminal view rejects the next one. Breaking out of a for-await loop,
   * or the signal, closes the socket.
   */
  async *watch(queue: string, id: string, opts: CallOptions = {}): AsyncGenerator<View, void, undefined> {
    const views = new Inbox<View>();
    const ws = await this.dial(taskPath(queue, id) + "/watch", opts.signal, (ws) => {
      // The server pings every 15 s; pinging too means a server pinging
      // less often (--ws-ping) still answers in time. The clocks start once open.
      let silence: NodeJS.Timeout | undefined;
      let ping: NodeJS.Timeout | undefined;
      const alive = () => {
        clearTimeout(silence);
        silence = setTimeout(() => {
          views.end(new Error(`watch ${queue}/${id}: the server was silent for ${watchTiming.silenceMs} ms`));
          ws.terminate();
        }, watchTiming.silenceMs);
      };
      ws.once("open", () => {
        alive();
        ping = setInterval(() => ws.ping(), watchTiming.pingMs);
      });
      ws.on("ping", alive); // ws answers pings with pongs on its own
      ws.on("pong", alive);
      ws.on("message", (data) => {
        alive();
        try {
          views.push(JSON.parse(String(data)) as View);
        } catch (err) {
          views.end(new Error(`watch ${queue}/${id}: a message is not a status view: ${String(err)}`));
          ws.terminate();
        }
      });
      ws.on("error", (err) => views.end(new Error(`watch ${queue}/${id}: ${err.message}`, { cause: err })));
      ws.on("close", (code, reason) => {
        clearTimeout(silence);
        clearInterval(ping);
        // The reason says why the server closed it: the error code after a
        // live reload (1008 forbidden, ...), "task cleaned" after retention.
        const why = reason.length ? `, ${reason.toString()}` : "";
        views.end(new Error(`watch ${queue}/${id}: the socket ended (code ${code}${why}) before a terminal view`));
      });
    });
    const abort = () => {
      views.end(opts.signal?.reason ?? new Error("aborted"));
      ws.terminate();
    };
    opts.signal?.addEventListener("abort", abort, { once: true });
    try {
      for (;;) {
        const view = await views.next();
        yield view;
        if (view.status === "finished" || view.status === "failed") return; // the server closes with 1000 now
      }
    } finally {
      opts.signal?.removeEventListener("abort", abort);
      closeGracefully(ws);
    }
  }

  /**
   * Opens a WebSocket to the escaped path with the client's Host header and
   * token. A refused handshake rejects with the server's TaskhosterError.
   * listen is called with the socket before it opens: the server's first
   * message may come in the same packet as the handshake's answer, and is
   * emitted before the returned promise's reactions run. Its listeners must
   * take "error" events: they come also after a refused handshake.
   * For this package's own use (the watch and the worker socket).
   * @internal
   */
  dial(path: string, signal: AbortSignal | undefined, listen: (ws: WebSocket) => void): Promise<WebSocket> {
    const url = this.#base.replace(/^http/, "ws") + path; // https → wss
    const headers: Record<string, string> = {};
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    if (this.#host !== undefined) headers["host"] = this.#host;
    signal?.throwIfAborted();
    const ws = new WebSocket(url, { headers, handshakeTimeout: handshakeTimeoutMs });
    listen(ws);
    return new Promise((resolve, reject) => {
      const settle = () => {
        signal?.removeEventListener("abort", abort);
        ws.off("open", open).off("error", error).off("unexpected-response", refused);
      };
      const abort = () => {
        settle();
        ws.terminate();
        reject(signal?.reason);
      };
      const open = () => {
        settle();
        resolve(ws);
      };
      const error = (err: Error) => {
        settle();
        reject(new Error(`dial ${path}: ${err.message}`, { cause: err }));
      };
      const refused = (_req: http.ClientRequest, res: http.IncomingMessage) => {
        settle();
        readBody(res, maxErrorBody).then(
          (text) => reject(errorFrom(res.statusCode ?? 0, text)),
          (err: Error) => reject(err),
        ).finally(() => ws.terminate()); // aborts the handshake: "error" and "close" go to listen's handlers
      };
      signal?.addEventListener("abort", abort, { once: true });
      ws.on("open", open).on("error", error).on("unexpected-response", refused);
    });
  }

  /**
   * Sends one request with a JSON body (unless body is undefined) and
   * parses a 2xx JSON answer; any other answer becomes a TaskhosterError.
   */
  #request(
    method: string,
    path: string,
    opts: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal | undefined },
  ): Promise<{ status: number; body: unknown }> {
    const url = new URL(this.#base + path);
    const headers: Record<string, string> = { accept: "application/json", ...opts.headers };
    let payload: string | undefined;
    if (opts.body !== undefined) {
      payload = JSON.stringify(opts.body);
      if (payload === undefined) throw new TypeError(`${method} ${path}: the body cannot be written as JSON`);
      headers["content-type"] = "application/json";
      headers["content-length"] = String(Buffer.byteLength(payload));
    }
    if (this.#token !== undefined) headers["authorization"] = `Bearer ${this.#token}`;
    if (this.#host !== undefined) headers["host"] = this.#host;
    const send = url.protocol === "https:" ? https.request : http.request;
    return new Promise((resolve, reject) => {
      const req = send(url, { method, headers, signal: opts.signal }, (res) => {
        const status = res.statusCode ?? 0;
        const ok = status >= 200 && status <= 299;
        readBody(res, ok ? Infinity : maxErrorBody).then((text) => {
          if (!ok) return reject(errorFrom(status, text));
          try {
            resolve({ status, body: JSON.parse(text) });
          } catch (err) {
            reject(new Error(`${method} ${path}: the answer is not JSON: ${String(err)}`));
          }
        }, reject);
      });
      req.on("error", reject);
      req.end(payload);
    });
  }
}

function queuePath(queue: string): string {
  return "/" + encodeURIComponent(queue);
}

function taskPath(queue: string, id: string): string {
  return queuePath(queue) + "/" + encodeURIComponent(id);
}

/** The query string of a post's options (SPEC §11). */
function postQuery(opts: BatchOptions): string {
  const q = new URLSearchParams();
  if (opts.delaySeconds !== undefined) q.set("delay", String(opts.delaySeconds));
  if (opts.notBefore !== undefined) {
    q.set("notBefore", String(opts.notBefore instanceof Date ? opts.notBefore.getTime() : opts.notBefore));
  }
  if (opts.priority !== undefined) q.set("priority", String(opts.priority));
  const s = q.toString();
  return s ? "?" + s : "";
}

/** Reads a response whole, failing past limit bytes. */
function readBody(res: http.IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        res.destroy(new Error(`the answer is over ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    res.on("error", reject);
  });
}

/**
 * Turns an error answer into a TaskhosterError. A body that is not the
 * server's error object (a proxy's page, say) keeps its first line as the
 * message and the status text as the code, so the caller still learns
 * something useful.
 */
export function errorFrom(status: number, text: string): TaskhosterError {
  try {
    const body = JSON.parse(text) as { error?: unknown; message?: unknown; details?: unknown };
    if (typeof body.error === "string" && body.error !== "") {
      const details = Array.isArray(body.details) ? (body.details as Violation[]) : [];
      return new TaskhosterError(status, body.error, typeof body.message === "string" ? body.message : "", details);
    }
  } catch {
    // not JSON: described below
  }
  const code = (http.STATUS_CODES[status] ?? "http error").toLowerCase().replaceAll(" ", "_");
  let line = text.trim().split("\n", 1)[0] ?? "";
  if (line.length > 200) line = line.slice(0, 200) + "…";
  return new TaskhosterError(status, code, line);
}

/** Sends close code 1000 so the peer sees a goodbye rather than a drop, then drops it if no answer comes. */
export function closeGracefully(ws: WebSocket): void {
  if (ws.readyState === WebSocket.CLOSED) return;
  if (ws.readyState === WebSocket.OPEN) ws.close(1000);
  const t = setTimeout(() => ws.terminate(), closeWaitMs);
  t.unref();
  ws.once("close", () => clearTimeout(t));
}

/**
 * Values pushed by event handlers, taken one at a time by an async reader;
 * end() makes every later take reject (after the values already pushed).
 */
export class Inbox<T> {
  #values: T[] = [];
  #ended: Error | undefined;
  #waiter: { resolve: (v: T) => void; reject: (e: Error) => void } | undefined;

  push(value: T): void {
    if (this.#ended) return;
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      w.resolve(value);
      return;
    }
    this.#values.push(value);
  }

  end(err: Error): void {
    if (this.#ended) return;
    this.#ended = err;
    if (this.#waiter) {
      const w = this.#waiter;
      this.#waiter = undefined;
      w.reject(err);
    }
  }

  next(): Promise<T> {
    if (this.#values.length > 0) return Promise.resolve(this.#values.shift() as T);
    if (this.#ended) return Promise.reject(this.#ended);
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }
}
