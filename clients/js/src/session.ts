// One open worker socket (SPEC §4): numbered requests and their replies.
import type WebSocket from "ws";

import { closeGracefully, closeWaitMs } from "./client.js";
import { CancelledError, TaskhosterError, type Violation } from "./errors.js";
import type { Lease, Status } from "./types.js";
import type { Logger } from "./worker.js";

/**
 * How often a worker pings the server. The server pings too (every 15 s),
 * but pinging ourselves means a silent server is noticed even if it forgets to.
 */
const pingEveryMs = 15_000;
/**
 * How long a worker socket may stay silent (no message, ping or pong) before
 * it counts as dropped: two missed pings and then some, like the server's 30 s.
 */
const peerTimeoutMs = 45_000;

/** A frame of the worker socket, in either direction; each type fills the fields it needs. */
export interface Message {
  type: string;
  ref?: number;
  id?: string;
  query?: unknown;
  progress?: unknown;
  result?: unknown;
  delay?: number;
  reason?: unknown;
  // The server's replies.
  item?: unknown;
  attempts?: number;
  lease?: Lease;
  accepted?: boolean;
  status?: Status;
  error?: string;
  message?: string;
  details?: Violation[];
}

/**
 * The socket closed before the reply came. For a claim that is harmless
 * (the server drops it); results are sent again over the next socket.
 */
export class SessionClosedError extends Error {
  override name = "SessionClosedError";
}

interface Waiter {
  resolve: (m: Message) => void;
  reject: (e: Error) => void;
}

export class Session {
  readonly started = Date.now();
  /** Resolves, with why, once the socket is gone. */
  readonly closed: Promise<Error>;
  #isClosed = false;
  #why: Error | undefined;
  #nextRef = 0;
  readonly #ws: WebSocket;
  readonly #log: Logger;
  readonly #waiting = new Map<number, Waiter>();
  /**
   * The tasks handed out on this socket whose handlers may still run: task
   * id → aborted with a CancelledError when the server cancels it.
   */
  readonly #held = new Map<string, AbortController>();

  constructor(ws: WebSocket, log: Logger) {
    this.#ws = ws;
    this.#log = log;
    // The socket may still be opening: the clocks start once it is open.
    let silence: NodeJS.Timeout | undefined;
    let ping: NodeJS.Timeout | undefined;
    const alive = () => {
      clearTimeout(silence);
      silence = setTimeout(() => ws.terminate(), peerTimeoutMs);
    };
    ws.once("open", () => {
      alive();
      ping = setInterval(() => ws.ping(), pingEveryMs);
    });
    ws.on("ping", alive); // ws answers pings with pongs on its own
    ws.on("pong", alive);
    ws.on("message", (data) => {
      alive();
      this.#read(String(data));
    });
    ws.on("error", (err) => {
      this.#why ??= err;
    });
    this.closed = new Promise((resolve) => {
      ws.once("close", (code, reason) => {
        clearTimeout(silence);
        clearInterval(ping);
        this.#isClosed = true;
        const why = new SessionClosedError(
          `worker socket closed (code ${code}${reason.length ? `, ${reason.toString()}` : ""})` +
            (this.#why ? `: ${this.#why.message}` : ""),
        );
        for (const w of this.#waiting.values()) w.reject(why);
        this.#waiting.clear();
        resolve(why);
      });
    });
  }

  get isClosed(): boolean {
    return this.#isClosed;
  }

  /** Hands each reply to the request whose ref it echoes. */
  #read(text: string): void {
    let m: Message;
    try {
      m = JSON.parse(text) as Message;
    } catch (err) {
      this.#log.warn?.("ignoring a worker socket message that is not JSON", { error: String(err) });
      return;
    }
    if (m.type === "cancelled" && m.ref === undefined) {
      const held = m.id === undefined ? undefined : this.#held.get(m.id);
      if (held) held.abort(new CancelledError(m.id ?? ""));
      else this.#log.info?.("a task not running here was cancelled", { task: m.id });
      return;
    }
    if (m.ref === undefined) {
      this.#log.warn?.("ignoring a worker socket message without a ref", { type: m.type, code: m.error });
      return;
    }
    const w = this.#waiting.get(m.ref);
    this.#waiting.delete(m.ref);
    if (m.type === "task" && m.id !== undefined) {
      if (!w) {
        // Its claim was given up (the worker is draining): nobody runs it,
        // and the server re-queues it when this socket closes.
        this.#log.info?.("task arrived after its claim was given up; it goes back to the queue when the socket closes", {
          task: m.id,
        });
        return;
      }
      // Before the claim sees it, so a cancel right behind it is not missed.
      this.#held.set(m.id, new AbortController());
    }
    if (!w) return;
    if (m.type === "error") w.reject(new TaskhosterError(0, m.error ?? "error", m.message ?? "", m.details ?? []));
    else w.resolve(m);
  }

  /**
   * The signal aborted when the server cancels task id, which was handed
   * out here; forget() stops watching.
   */
  cancelSignal(id: string): { signal: AbortSignal | undefined; forget: () => void } {
    const held = this.#held.get(id);
    return {
      signal: held?.signal,
      forget: () => {
        if (this.#held.get(id) === held) this.#held.delete(id);
      },
    };
  }

  /**
   * Sends m with a fresh ref and resolves to the reply; rejects with a
   * SessionClosedError when the socket ends first, a TaskhosterError for an
   * "error" reply, or the reason of the first of signals to abort.
   */
  request(m: Message, signals: readonly AbortSignal[] = []): Promise<Message> {
    if (this.#isClosed) return Promise.reject(new SessionClosedError("worker socket closed"));
    for (const s of signals) if (s.aborted) return Promise.reject(s.reason);
    const ref = ++this.#nextRef;
    let text: string;
    try {
      // Before the reply slot is taken: a value JSON cannot carry (a
      // BigInt, a cycle) must not leave a slot no reply will ever free.
      text = JSON.stringify({ ...m, ref });
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise<Message>((resolve, reject) => {
      const abort = (e: Event) => {
        this.#waiting.delete(ref);
        cleanup();
        reject((e.target as AbortSignal).reason);
      };
      const cleanup = () => {
        for (const s of signals) s.removeEventListener("abort", abort);
      };
      for (const s of signals) s.addEventListener("abort", abort, { once: true });
      this.#waiting.set(ref, {
        resolve: (reply) => {
          cleanup();
          resolve(reply);
        },
        reject: (err) => {
          cleanup();
          reject(err);
        },
      });
      this.#ws.send(text, (err) => {
        if (!err || !this.#waiting.has(ref)) return;
        this.#waiting.delete(ref);
        cleanup();
        this.#ws.terminate(); // a failed write leaves the stream unusable
        reject(new SessionClosedError(`worker socket write failed: ${err.message}`));
      });
    });
  }

  /** Says goodbye with code 1000, waits briefly for the server's close frame, then drops the connection. */
  async close(): Promise<void> {
    closeGracefully(this.#ws);
    const t = setTimeout(() => this.#ws.terminate(), closeWaitMs);
    await this.closed;
    clearTimeout(t);
  }
}
