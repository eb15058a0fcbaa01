// The values of the HTTP API and the worker socket (SPEC §3, §4, §11).
// Times are Unix milliseconds, as on the wire.

/** Any JSON value: what items, progress, results and reasons are. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** A task's status: pending and processing change; finished and failed are terminal. */
export type Status = "pending" | "processing" | "finished" | "failed";

/** What a producer sees of a task (SPEC §3, "the status view"). */
export interface View {
  id: string;
  queue: string;
  status: Status;
  /** How many times it was claimed. */
  attempts: number;
  /** The last accepted progress, or null. */
  progress: JSONValue;
  /** The result once finished, or null. */
  result: JSONValue;
  /**
   * The code a failed task ended with: "timeout", "attempts", "failed" (a
   * worker failed it), "cancelled" or "corrupt"; null otherwise.
   */
  error: string | null;
  postedAt: number;
  updatedAt: number;
  finishedAt: number | null;
  /** When the task becomes claimable: from a delayed post, or the backoff after it came back. */
  notBefore?: number;
  /** The post's priority; left out when 0. */
  priority?: number;
  /** The reason of the last give-back, or of a worker's failure. */
  failure?: JSONValue;
}

/** Which worker holds a processing task, and until when. */
export interface Lease {
  worker: string;
  until: number;
}

/** The server's answer to a report: progress, heartbeat, result, release, fail, cancel. */
export interface Ack {
  /**
   * False when the report came too late: the task is terminal (result,
   * fail, cancel), or no longer processing under this worker (progress,
   * heartbeat, release).
   */
  accepted: boolean;
  /**
   * The task's status when not accepted; for an accepted release the status
   * it went to ("pending", or "failed" after its last allowed attempt); for
   * an accepted cancel, "failed".
   */
  status?: Status;
  /** The extended lease, after accepted progress or a heartbeat. */
  lease?: Lease;
}

/** The server's answer to a post. */
export interface Posted {
  id: string;
  /** The task's status now: "pending" for a new one. */
  status: Status;
  /**
   * True when this post made the task (201); false when an earlier post
   * with the same idempotency key did (200), and this one made nothing.
   */
  created: boolean;
}

/** Asks more of a post than its item (SPEC §11, §12). */
export interface PostOptions {
  /** Claimable only this many seconds after the server took it (0 to 31536000; fractions allowed). */
  delaySeconds?: number;
  /** Claimable only from this moment on (a Date or Unix milliseconds). Not with delaySeconds. */
  notBefore?: Date | number;
  /** -1000 to 1000, default 0: claims take the highest priority first, then the oldest. */
  priority?: number;
  /**
   * An idempotency key (1 to 200 visible ASCII characters), sent as the
   * Idempotency-Key header: a later post with the same key makes nothing and
   * answers with the first task's id (created false); with a different item
   * it is a 409 idempotency_conflict. Not allowed on a batch.
   */
  key?: string;
}

/** The options a batch takes: every one applies to all its items. */
export type BatchOptions = Omit<PostOptions, "key">;
