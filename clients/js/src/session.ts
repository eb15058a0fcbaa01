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
  /** Bytes of the request's frame. */
  size: number;
}

/** The close code of a server refusing a frame over its size limit. */
const closeMessageTooBig = 1009;
/**
 * Messages bigger than this go out in fragments of this size, one at a
 * time (no limit of the server's is below it: maxItemBytes plus 64 KiB).
 */
const pieceBytes = 64 << 10;

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
  /** The size of the largest request given up (a signal aborted) before its reply came. */
  #givenUp = 0;
  /** The message being written in fragments, which nothing else may come between; then the next. */
  #writing: Promise<void> = Promise.resolve();
  /** How many messages wait to be written in fragments, or are being. */
  #pieced = 0;
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
        // A 1009 close is the server refusing a frame over its limit. The
        // culprit got no reply, so it is among the requests still waiting
        // or given up, at most as big as the largest of them; and every
        // request that big is over the limit too. Those are refused as
        // too_large, as over HTTP (413): sent again, they would close the
        // next socket too, and a Worker would resend them forever.
        let tooBig = 0;
        if (code === closeMessageTooBig) {
          tooBig = this.#givenUp;
          for (const w of this.#waiting.values()) tooBig = Math.max(tooBig, w.size);
        }
        for (const w of this.#waiting.values()) {
          if (tooBig > 0 && w.size >= tooBig) {
            w.reject(
              new TaskhosterError(
                0,
                "too_large",
                `the message (${w.size} bytes) is more than the worker socket takes: the server closed it (1009 message too big)`,
              ),
            );
          } else w.reject(why);
        }
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
   * "error" reply (or too_large when the server closed the socket because
   * m was over its size limit), or the reason of the first of signals to abort.
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
    const size = Buffer.byteLength(text);
    return new Promise<Message>((resolve, reject) => {
      const abort = (e: Event) => {
        // Should the server close the socket over this one, the close
        // must still be told apart from a drop.
        if (this.#waiting.delete(ref)) this.#givenUp = Math.max(this.#givenUp, size);
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
        size,
      });
      this.#write(text, size, (err) => {
        if (!err || this.#isClosed) return;
        this.#why ??= new Error(`worker socket write failed: ${err.message}`);
        // A failed write leaves the stream unusable; but the server may
        // have said why it closed (1009 for a frame over its limit, often
        // while a big one is still being written), so the close frame gets
        // a moment to arrive before the connection goes. The close rejects
        // this request.
        const t = setTimeout(() => this.#ws.terminate(), closeWaitMs);
        this.#ws.once("close", () => clearTimeout(t));
      });
    });
  }

  /**
   * Sends text as one message; done is called once it is written out, with
   * the write's error if any. A big message goes in fragments, each once the
   * one before is written and the socket was read meanwhile: a server
   * refusing it (1009) closes the connection as soon as it reads too much,
   * and Node drops a connection whose write fails at once, unread, so the
   * close frame would be lost in one long write, and the message taken for
   * a dropped socket and sent again.
   */
  #write(text: string, size: number, done: (err?: Error) => void): void {
    if (size <= pieceBytes && this.#pieced === 0) {
      this.#ws.send(text, done); // the common case
      return;
    }
    const data = Buffer.from(text);
    const prev = this.#writing;
    this.#pieced++;
    this.#writing = (async () => {
      await prev;
      for (let at = 0; ; at += pieceBytes) {
        const fin = at + pieceBytes >= data.length;
        const err = await new Promise<Error | undefined>((resolve) =>
          this.#ws.send(data.subarray(at, at + pieceBytes), { binary: false, fin }, resolve),
        );
        if (err || fin) return done(err);
        // A turn of the event loop: it reads what came meanwhile (the server's close) before the next write.
        await new Promise((resolve) => setImmediate(resolve));
      }
    })()
      .catch(done)
      .finally(() => this.#pieced--);
  }

  /** Says goodbye with code 1000, waits briefly for the server's close frame, then drops the connection. */
  async close(): Promise<void> {
    closeGracefully(this.#ws);
    const t = setTimeout(() => this.#ws.terminate(), closeWaitMs);
    await this.closed;
    clearTimeout(t);
  }
}
