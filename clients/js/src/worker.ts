// A worker over the worker socket (SPEC §4, §11): claims kept open,
// heartbeats, give-back, reconnection with jittered backoff.
import { Backoff } from "./backoff.js";
import type { Client } from "./client.js";
import { CancelledError, Failure, Release, TaskhosterError } from "./errors.js";
import { Session, SessionClosedError, type Message } from "./session.js";
import type { Ack, Lease } from "./types.js";

/** Where a Worker reports connection trouble; console fits. */
export interface Logger {
  info?(msg: string, fields?: object): void;
  warn?(msg: string, fields?: object): void;
  error?(msg: string, fields?: object): void;
}

/**
 * Does one task and returns (or resolves to) its result, which the Worker
 * hands in. While it runs, the Worker keeps the lease alive with heartbeats
 * (one every third of the lease), so a long task needs neither progress
 * reports nor a long leaseSeconds.
 *
 * A handler ends a task in one of these ways:
 * - it returns a result: the Worker hands it in (undefined is sent as null);
 * - it throws a Release: the Worker gives the task back, to be retried
 *   after the release's delay and the queue's backoff, or to become a dead
 *   letter (failed, "attempts") once the queue's maxAttempts are used up;
 * - it throws a Failure: the Worker fails the task for good (error "failed");
 * - it throws anything else: the Worker gives the task back as for a
 *   Release without delay, with the reason {"error": the error's message}
 *   (or with no reason, if the queue's failure schema refuses that one).
 *
 * signal aborts when the Worker is stopped hard (run's signal), and when
 * the server cancels the task (signal.reason is then a CancelledError;
 * whatever the handler returns is not handed in); drain() lets handlers
 * finish.
 */
export type Handler<Item> = (task: Task<Item>, signal: AbortSignal) => unknown;

/** A task leased to a worker: what it has to do, and the lease it holds meanwhile. */
export class Task<Item = any> {
  readonly id: string;
  readonly queue: string;
  /** The item as posted. */
  readonly item: Item;
  /** How many times it was claimed, this claim included. */
  readonly attempts: number;
  /** The lease as it was handed out. */
  readonly lease: Lease;
  readonly #session: Session;

  /** @internal */
  constructor(queue: string, m: Message, session: Session) {
    this.id = m.id ?? "";
    this.queue = queue;
    this.item = m.item as Item;
    this.attempts = m.attempts ?? 0;
    this.lease = m.lease ?? { worker: "", until: 0 };
    this.#session = session;
  }

  /**
   * Reports value as the task's progress, which also extends the lease.
   * Resolves to false when the lease is gone: it lapsed, the socket the task
   * was claimed on dropped (which re-queues it), or someone finished it; a
   * handler may then stop early, since its result will probably not count.
   */
  async progress(value: unknown): Promise<boolean> {
    return (await this.#report({ type: "progress", id: this.id, progress: value })).accepted;
  }

  /** Extends the lease without a progress record; false when the lease is gone. The Worker sends these on its own. */
  async heartbeat(): Promise<boolean> {
    return (await this.heartbeatAck()).accepted;
  }

  /** @internal heartbeat with the server's whole answer. */
  heartbeatAck(): Promise<Ack> {
    return this.#report({ type: "heartbeat", id: this.id });
  }

  async #report(m: Message): Promise<Ack> {
    try {
      return ack(await this.#session.request(m));
    } catch (err) {
      // The server re-queued the task when that socket closed: the lease is
      // gone, which is exactly what accepted false says.
      if (err instanceof SessionClosedError) return { accepted: false };
      throw err;
    }
  }
}

/** How one task ended for a Worker. */
export interface Outcome<Item = any> {
  task: Task<Item>;
  /** What the Worker handed in: "result", "release" or "fail"; "" when nothing (error says why). */
  sent: "result" | "release" | "fail" | "";
  /**
   * The server's answer. accepted false: the task was already finished or
   * failed (result, fail), or no longer leased to this worker (release).
   * For an accepted release, status is "pending", or "failed" after its last
   * allowed attempt.
   */
  ack: Ack;
  /**
   * What the handler threw, when it was not a Release or Failure, or why
   * its result can never be handed in (a TypeError, a TaskhosterError
   * too_large or invalid_result): the task was given back; a
   * CancelledError when the server cancelled the task (nothing was handed
   * in); the error from handing in (a TaskhosterError invalid_failure,
   * say), or the stop's reason when the worker stopped hard.
   */
  error?: unknown;
  /** How long the handler ran, in milliseconds. */
  tookMs: number;
}

export interface WorkerOptions<Item> {
  client: Client;
  queue: string;
  handler: Handler<Item>;
  /** The lease holder's name (?worker=); by default the server uses the user's name. */
  name?: string;
  /** A JSON Schema an item must match to be handed to this worker. */
  query?: unknown;
  /** How many tasks run at once: the number of claims kept open. 1 to 256, default 1. */
  concurrency?: number;
  /** If set, how many tasks the worker handles before run() resolves; it never claims more. */
  limit?: number;
  /** Told how each task ended. */
  onOutcome?: (o: Outcome<Item>) => void;
  /** Receives connection trouble and, without onOutcome, task outcomes. Default: nothing is logged. */
  logger?: Logger;
  /**
   * Bounds of the wait between reconnection attempts, and between claims the
   * server refused for now (503 too_many_waiting, say): 250 ms and 30 s by default.
   */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

/** The server's limit of open claims per socket. */
const maxConcurrency = 256;
/**
 * How long a socket must have held for the next drop to count as new
 * trouble, starting the backoff over; a server that accepts and drops at
 * once is not hammered.
 */
const stableAfterMs = 10_000;
/** Bounds how often heartbeats go out, whatever the lease says. */
const minBeatMs = 100;

/**
 * Works one queue over the worker socket: keeps `concurrency` claims open,
 * runs the handler for each task it is handed, hands in the result and
 * claims again. When the socket drops it reconnects with capped, jittered
 * exponential backoff; the server re-queues the tasks that were leased on
 * the dropped socket at once, and results of handlers still running are
 * handed in over the next socket (a result counts whenever the task is not
 * yet finished).
 */
export class Worker<Item = any> {
  readonly #o: Required<Pick<WorkerOptions<Item>, "client" | "queue" | "handler" | "concurrency">> &
    WorkerOptions<Item>;
  readonly #log: Logger;
  readonly #drain = new AbortController();
  #running = false;

  constructor(opts: WorkerOptions<Item>) {
    const concurrency = opts.concurrency ?? 1;
    if (!opts.client) throw new TypeError("Worker: client is required");
    if (!opts.queue) throw new TypeError("Worker: queue is required");
    if (typeof opts.handler !== "function") throw new TypeError("Worker: handler must be a function");
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > maxConcurrency) {
      throw new RangeError(`Worker: concurrency must be 1 to ${maxConcurrency}, not ${concurrency}`);
    }
    if (opts.limit !== undefined && !(Number.isInteger(opts.limit) && opts.limit > 0)) {
      throw new RangeError(`Worker: limit must be a positive integer, not ${opts.limit}`);
    }
    if (opts.query !== undefined) {
      // Every claim writes the query out: one JSON cannot carry (a BigInt, a
      // cycle) would fail each claim at once, and claiming again would spin
      // without ever yielding to the event loop. Refused here, as the Go
      // client's Run refuses it.
      try {
        JSON.stringify(opts.query);
      } catch (err) {
        throw new TypeError(`Worker: query cannot be written as JSON: ${String(err)}`, { cause: err });
      }
    }
    this.#o = { ...opts, concurrency };
    this.#log = opts.logger ?? {};
  }

  /**
   * Stops the worker gently: it claims no more tasks, lets the running
   * handlers finish and hands in their results; then run() closes the
   * socket and resolves. May be called more than once, also before run().
   */
  drain(): void {
    this.#drain.abort(new Error("worker draining"));
  }

  /**
   * Works the queue until drain() was called and the running tasks are done,
   * or `limit` tasks are done (it resolves), or signal aborts (it rejects
   * with signal.reason; running handlers see their signal abort, and the
   * server re-queues their tasks when the socket closes).
   *
   * It also rejects when retrying cannot help: the server refused the very
   * first socket with a 4xx (bad token, no access, no such queue), or
   * refused the claim query. Once a socket has worked, later refusals (say,
   * the queue file is being edited) are logged and retried. And it rejects
   * with the error of an onOutcome (or logger) that threw, once the whole
   * worker has stopped as for an aborted signal.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.#running) throw new Error("Worker: run() is already running");
    this.#running = true;
    const hard = new AbortController();
    const onAbort = () => hard.abort(signal?.reason);
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const r = new Run(this.#o, this.#log, hard, this.#drain.signal);
    try {
      const conn = new AbortController();
      const connected = r.connect(AbortSignal.any([hard.signal, conn.signal]));
      const slots = Math.min(this.#o.concurrency, this.#o.limit ?? Infinity);
      // A slot ends in an error only when a callback of the caller's threw
      // (onOutcome, say): that stops the others too, before run rejects,
      // or they would go on working over a socket nobody closes.
      await Promise.all(Array.from({ length: slots }, () => r.slot().catch((err: unknown) => r.fail(asError(err)))));
      conn.abort(); // only now: draining handlers hand in their results over the socket
      await connected;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      this.#running = false;
    }
    if (r.fatal) throw r.fatal;
    if (signal?.aborted) throw signal.reason;
  }
}

/** The state of one run(). */
class Run<Item> {
  readonly #link = new Link();
  #budget: number;
  fatal: Error | undefined;

  constructor(
    readonly o: WorkerOptions<Item> & { concurrency: number },
    readonly log: Logger,
    /** Aborts on a hard stop or a fatal error. */
    readonly hard: AbortController,
    readonly drain: AbortSignal,
  ) {
    this.#budget = o.limit ?? Infinity;
  }

  fail(err: Error): void {
    this.fatal ??= err;
    this.hard.abort(err);
  }

  /** One unit of concurrency: claim, handle, hand in, again. */
  async slot(): Promise<void> {
    while (this.#budget > 0) {
      this.#budget--;
      const t = await this.#claim();
      if (!t) return;
      await this.#handle(t);
    }
  }

  /** Keeps one claim open, across reconnections, until a task arrives; undefined when the worker stops first. */
  async #claim(): Promise<{ task: Task<Item>; session: Session } | undefined> {
    const query = this.o.query;
    let wait: Backoff | undefined; // after a passing refusal
    for (;;) {
      const s = await this.#link.wait([this.hard.signal, this.drain]);
      if (!s) return undefined;
      try {
        const reply = await s.request(query === undefined ? { type: "claim" } : { type: "claim", query }, [
          this.hard.signal,
          this.drain,
        ]);
        if (reply.type === "task") return { task: new Task<Item>(this.o.queue, reply, s), session: s };
        this.log.warn?.("unexpected answer to a claim; claiming again", { type: reply.type });
      } catch (err) {
        if (err instanceof TaskhosterError && lastingRefusal(err.code)) {
          // An invalid or too large query (or too many claims) stays so: stop.
          this.fail(new Error(`claim from ${this.o.queue}: ${err.message}`, { cause: err }));
          return undefined;
        }
        if (err instanceof TaskhosterError) {
          // Say, too many claims waiting on the server (503
          // too_many_waiting), or its store failing (storage_unavailable):
          // passing trouble, as the Go client's Worker takes it. Claim
          // again later; a drain or a hard stop ends the wait.
          wait ??= new Backoff(this.o.minBackoffMs ?? 250, this.o.maxBackoffMs ?? 30_000);
          const d = wait.next();
          this.log.warn?.("claim refused; claiming again later", { code: err.code, error: err.message, inMs: Math.round(d) });
          await sleep(d, AbortSignal.any([this.hard.signal, this.drain]));
        }
        // The socket dropped (the next one gets a new claim), or the worker
        // is stopping (the next wait says so).
      }
    }
  }

  /** Runs the handler, with heartbeats, and hands in what it returned; for a task the server cancelled meanwhile, nothing. */
  async #handle({ task, session }: { task: Task<Item>; session: Session }): Promise<void> {
    const cancel = session.cancelSignal(task.id);
    try {
      if (this.hard.signal.aborted) return; // stopped hard as the task arrived: the server re-queues it
      const signals = [this.hard.signal, ...(cancel.signal ? [cancel.signal] : [])];
      const signal = AbortSignal.any(signals);
      const started = performance.now();
      const stopBeat = this.#beat(task, signal);
      let result: unknown;
      let thrown: { error: unknown } | undefined;
      try {
        result = await this.o.handler(task, signal);
      } catch (error) {
        thrown = { error };
      } finally {
        stopBeat();
      }
      const tookMs = performance.now() - started;
      if (cancel.signal?.reason instanceof CancelledError) {
        this.#done({ task, sent: "", ack: { accepted: false, status: "failed" }, error: cancel.signal.reason, tookMs });
        return;
      }
      const m = handIn(task.id, result, thrown);
      const outcome: Outcome<Item> = { task, sent: m.type as Outcome["sent"], ack: { accepted: false }, tookMs };
      if (thrown && !(thrown.error instanceof Release) && !(thrown.error instanceof Failure)) {
        outcome.error = thrown.error;
      }
      try {
        // A give-back after a handler that threw goes without its reason
        // should the queue's failure schema refuse it (#giveBack).
        outcome.ack = m.type === "release" && outcome.error ? await this.#giveBack(m, session, outcome) : await this.#send(m, session);
      } catch (err) {
        if (m.type === "result" && (err instanceof TypeError || isCode(err, "too_large") || isCode(err, "invalid_result"))) {
          // A result JSON cannot carry (a BigInt, a cycle), one the queue's
          // result schema refuses, or one over the worker socket's limit
          // (the server closed the socket, which re-queued the task
          // already: the release is not sent): give the task back with
          // why, as for a handler that threw, rather than leave it to its
          // lease or send it again.
          outcome.sent = "release";
          outcome.error = err;
          outcome.ack = await this.#giveBack(handIn(task.id, undefined, { error: err }), session, outcome);
        } else {
          this.#unsent(outcome, err);
        }
      }
      this.#done(outcome);
    } finally {
      cancel.forget();
    }
  }

  /**
   * Gives the task back with m, a release whose reason describes an error
   * (a handler that threw, a result that could not be handed in); should
   * the queue's failure schema refuse that reason, without it, rather than
   * leave the task held until its lease lapses.
   */
  async #giveBack(m: Message, on: Session, o: Outcome<Item>): Promise<Ack> {
    try {
      return await this.#send(m, on);
    } catch (err) {
      if (!isCode(err, "invalid_failure")) return this.#unsent(o, err);
      const { reason: _, ...bare } = m;
      return this.#send(bare, on).catch((e: unknown) => this.#unsent(o, e));
    }
  }

  #unsent(o: Outcome<Item>, err: unknown): Ack {
    o.sent = "";
    o.error = err;
    return { accepted: false };
  }

  /**
   * Hands in a result, release or failure over the current socket, waiting
   * for the next one if it drops first. (If it drops after the server stored
   * it but before the ack, the retry is answered accepted false.) A release
   * goes only over on, the socket the task was claimed on: once that has
   * dropped, the server has re-queued the task itself (SPEC §4), and on a
   * newer socket the release could give back a newer claim of the task by
   * this Worker (another slot took it once it was re-queued), which passes
   * for the lease holder. It is answered not accepted, with no status, as
   * the Go client's Worker does.
   */
  async #send(m: Message, on: Session): Promise<Ack> {
    for (;;) {
      const s = await this.#link.wait([this.hard.signal]);
      if (!s) throw this.hard.signal.reason;
      if (m.type === "release" && s !== on) {
        this.log.info?.("the socket the task was claimed on dropped, which gave it back; its release is not sent", {
          task: m.id,
        });
        return { accepted: false };
      }
      try {
        return ack(await s.request(m, [this.hard.signal]));
      } catch (err) {
        if (!(err instanceof SessionClosedError)) throw err;
      }
    }
  }

  /**
   * Keeps task's lease alive while its handler runs, until the returned
   * function is called: a heartbeat every third of the lease, over the socket
   * the task was claimed on. It stops early when a heartbeat is refused (the
   * lease is gone: it lapsed, or someone finished or failed the task) or that
   * socket closed (the server re-queued the task).
   */
  #beat(task: Task<Item>, signal: AbortSignal): () => void {
    let timer: NodeJS.Timeout | undefined;
    let stopped = false;
    const schedule = (until: number) => {
      timer = setTimeout(tick, beatEvery(until, Date.now()));
    };
    const tick = async () => {
      if (stopped || signal.aborted) return;
      try {
        const a = await task.heartbeatAck();
        if (stopped) return;
        if (!a.accepted) {
          this.log.info?.("heartbeat not accepted: the lease is gone", { task: task.id, status: a.status });
          return;
        }
        schedule(a.lease?.until ?? Date.now() + 3 * minBeatMs);
      } catch (err) {
        if (!stopped) this.log.warn?.("heartbeat failed; no more for this task", { task: task.id, error: String(err) });
      }
    };
    schedule(task.lease.until);
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  #done(o: Outcome<Item>): void {
    if (this.o.onOutcome) {
      this.o.onOutcome(o);
      return;
    }
    const task = o.task.id;
    if (o.error instanceof CancelledError) this.log.info?.("task cancelled by the server", { task });
    else if (o.sent === "" && this.hard.signal.aborted) {
      this.log.info?.("task abandoned as the worker stopped; the server re-queues it", { task });
    } else if (o.sent === "") this.log.error?.("task not handed in", { task, error: String(o.error) });
    else if (!o.ack.accepted) this.log.info?.(`${o.sent} not accepted`, { task, status: o.ack.status });
    else if (o.sent === "release") {
      this.log.info?.("task given back", { task, status: o.ack.status, error: o.error && String(o.error) });
    } else if (o.sent === "fail") this.log.info?.("task failed", { task });
  }

  /** Keeps a socket open for the slots until signal aborts. */
  async connect(signal: AbortSignal): Promise<void> {
    const b = new Backoff(this.o.minBackoffMs ?? 250, this.o.maxBackoffMs ?? 30_000);
    let worked = false;
    for (;;) {
      let s: Session;
      try {
        s = await this.#open(signal);
      } catch (err) {
        if (signal.aborted) return;
        if (!worked && err instanceof TaskhosterError && permanent(err.status)) {
          this.fail(new Error(`open the worker socket of ${this.o.queue}: ${err.message}`, { cause: err }));
          return;
        }
        const wait = b.next();
        this.log.warn?.("cannot open the worker socket; retrying", { error: String(err), inMs: Math.round(wait) });
        if (!(await sleep(wait, signal))) return;
        continue;
      }
      worked = true;
      this.#link.set(s);
      const why = await Promise.race([s.closed, aborted(signal)]);
      this.#link.set(undefined);
      if (signal.aborted) {
        await s.close();
        return;
      }
      if (Date.now() - s.started >= stableAfterMs) b.reset();
      const wait = b.next();
      this.log.warn?.("worker socket dropped; reconnecting", { error: String(why), inMs: Math.round(wait) });
      if (!(await sleep(wait, signal))) return;
    }
  }

  async #open(signal: AbortSignal): Promise<Session> {
    let path = "/" + encodeURIComponent(this.o.queue) + "/work";
    if (this.o.name !== undefined) path += "?worker=" + encodeURIComponent(this.o.name);
    let s: Session | undefined;
    await this.o.client.dial(path, signal, (ws) => {
      s = new Session(ws, this.log);
    });
    return s as Session;
  }
}

/** The message that hands in what a handler returned or threw. */
function handIn(id: string, result: unknown, thrown: { error: unknown } | undefined): Message {
  if (!thrown) return { type: "result", id, result: result === undefined ? null : result };
  const e = thrown.error;
  if (e instanceof Release) {
    const m: Message = { type: "release", id };
    if (e.delaySeconds > 0) m.delay = e.delaySeconds;
    if (e.reason !== undefined) m.reason = e.reason;
    return m;
  }
  if (e instanceof Failure) {
    return e.reason === undefined ? { type: "fail", id } : { type: "fail", id, reason: e.reason };
  }
  return { type: "release", id, reason: { error: e instanceof Error ? e.message : String(e) } };
}

function ack(m: Message): Ack {
  const a: Ack = { accepted: m.accepted === true };
  if (m.status !== undefined) a.status = m.status;
  if (m.lease !== undefined) a.lease = m.lease;
  return a;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

function isCode(err: unknown, code: string): boolean {
  return err instanceof TaskhosterError && err.code === code;
}

/**
 * A third of the lease that runs until `until`, as seen at now; a second
 * when the clocks disagree so much that it seems over already. (A third
 * leaves the other two for a slow network and for the clocks of worker and
 * server to differ.)
 */
export function beatEvery(until: number, now: number): number {
  const left = until - now;
  if (left <= 0) return 1000;
  return Math.max(left / 3, minBeatMs);
}

/**
 * Whether a claim refused with code would be refused again however long the
 * Worker waited: its query is invalid or makes the message larger than the
 * server reads (too_large: the socket was closed with 1009, and each claim
 * again would close the next one), or it asks for more claims than a socket
 * may have. run() stops on those (as the Go client's lastingRefusal).
 */
function lastingRefusal(code: string): boolean {
  return (
    code === "invalid_query" ||
    code === "invalid_request" ||
    code === "invalid_json" ||
    code === "too_large" ||
    code === "too_many_claims"
  );
}

/** A refused handshake that will be refused again: any 4xx but a timeout or rate limit. */
function permanent(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/** Waits ms, or until signal aborts; false if it aborted. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", stop);
      resolve(true);
    }, ms);
    const stop = () => {
      clearTimeout(t);
      resolve(false);
    };
    signal.addEventListener("abort", stop, { once: true });
  });
}

/** Resolves (to nothing) when signal aborts. */
function aborted(signal: AbortSignal): Promise<undefined> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(undefined);
    else signal.addEventListener("abort", () => resolve(undefined), { once: true });
  });
}

/** The current socket of a Worker, or none while it reconnects. */
class Link {
  #cur: Session | undefined;
  #changed = new Set<() => void>();

  set(s: Session | undefined): void {
    this.#cur = s;
    const waiters = this.#changed;
    this.#changed = new Set();
    for (const w of waiters) w();
  }

  /** An open socket, waiting for one; undefined once any of signals aborts. */
  async wait(signals: readonly AbortSignal[]): Promise<Session | undefined> {
    for (;;) {
      if (signals.some((s) => s.aborted)) return undefined;
      if (this.#cur && !this.#cur.isClosed) return this.#cur;
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.#changed.delete(wake);
          for (const s of signals) s.removeEventListener("abort", wake);
          resolve();
        };
        this.#changed.add(wake);
        for (const s of signals) s.addEventListener("abort", wake, { once: true });
      });
    }
  }
}
