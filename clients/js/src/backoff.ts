/**
 * Spaces out reconnection attempts: the delay doubles from min up to max,
 * and each wait is drawn at random from its upper half ("equal jitter"),
 * so that many workers dropped at once by a restarting server do not all
 * knock again at the same moment, while none waits less than half the
 * current delay. The same rule as the Go client's.
 */
export class Backoff {
  #attempt = 0;

  /**
   * @param minMs the first delay
   * @param maxMs the cap
   * @param random a number in [0, 1); tests replace it
   */
  constructor(
    readonly minMs: number,
    readonly maxMs: number,
    readonly random: () => number = Math.random,
  ) {}

  /** The wait before the next attempt, in milliseconds; counts the attempt. */
  next(): number {
    // Math.min keeps 2 ** attempt from growing past any use.
    const d = Math.min(this.maxMs, this.minMs * 2 ** Math.min(this.#attempt, 32));
    this.#attempt++;
    const half = d / 2;
    return half + this.random() * (d - half);
  }

  /** Starts over from min, after a connection that held. */
  reset(): void {
    this.#attempt = 0;
  }
}
