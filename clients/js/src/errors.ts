/** One way a JSON value breaks a queue's schema. */
export interface Violation {
  /** A JSON pointer into the value; "" for the whole value. */
  path: string;
  message: string;
}

/**
 * A failure the server explained: the HTTP status and the body
 * {"error": code, "message", "details"} of SPEC §3. Over the worker socket
 * the same code and message come in an "error" message, with status 0.
 */
export class TaskhosterError extends Error {
  override name = "TaskhosterError";
  /** The HTTP status; 0 for an error message on the worker socket. */
  readonly status: number;
  /** The stable word: "invalid_item", "unauthorized", "idempotency_conflict", ... */
  readonly code: string;
  /** The schema violations, for invalid_item and the like. */
  readonly details: Violation[];

  constructor(status: number, code: string, message: string, details: Violation[] = []) {
    const where = details.map((v) => `; ${v.path || "(the whole value)"}: ${v.message}`).join("");
    super(`${code}${status ? ` (${status})` : ""}${message ? `: ${message}` : ""}${where}`);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/**
 * Thrown by a handler to give its task back (SPEC §11): the worker sends a
 * release instead of a result, and the task is pending again, claimable
 * after the larger of delaySeconds and the queue's retry backoff, or failed
 * with error "attempts" after its last allowed attempt. The reason (any
 * JSON value) is kept in the task's failure field.
 *
 *     throw new Release({ delaySeconds: 60, reason: { why: "rate limited" } });
 */
export class Release extends Error {
  override name = "Release";
  readonly delaySeconds: number;
  readonly reason: unknown;

  constructor(opts: { delaySeconds?: number; reason?: unknown } = {}) {
    super(opts.delaySeconds ? `give the task back for ${opts.delaySeconds}s` : "give the task back");
    this.delaySeconds = opts.delaySeconds ?? 0;
    this.reason = opts.reason;
  }
}

/**
 * Thrown by a handler to fail its task for good: the task ends failed with
 * error "failed" and the reason (any JSON value) as its failure.
 *
 *     throw new Failure({ why: "no such image" });
 */
export class Failure extends Error {
  override name = "Failure";
  readonly reason: unknown;

  constructor(reason?: unknown) {
    super("fail the task");
    this.reason = reason;
  }
}

/**
 * The abort reason of a handler's signal when the server cancelled its task
 * (SPEC §12), and the outcome's error: nothing is handed in for such a
 * task, it is failed already with error "cancelled".
 */
export class CancelledError extends Error {
  override name = "CancelledError";
  constructor(readonly taskId: string) {
    super(`task ${taskId} was cancelled`);
  }
}
