import { Code, isTransient, toClaimdError } from "./errors.js";

/**
 * RetryPolicy bounds the client's own retries of a call that claimd did not
 * answer (UNAVAILABLE, DEADLINE_EXCEEDED, a reset connection), or refused
 * with a rate limit's RESOURCE_EXHAUSTED and RetryInfo: that one is retried
 * never sooner than its delay, and not at all when the delay would end past
 * totalTimeoutMs (the call then rejects at once with ResourceExhaustedError).
 * Zero or missing fields mean the defaults.
 */
export interface RetryPolicy {
  /** maxAttempts counts the first try; 1 disables retries. Default 4. */
  maxAttempts?: number;
  /** initialBackoffMs is the ceiling of the first pause. Default 50. */
  initialBackoffMs?: number;
  /** maxBackoffMs caps every pause. Default 1000. */
  maxBackoffMs?: number;
  /** multiplier grows the ceiling after each attempt. Default 2. */
  multiplier?: number;
  /**
   * totalTimeoutMs bounds all attempts and pauses of one call together.
   * Default 10000, so a guard answers before a provider's own webhook timeout.
   */
  totalTimeoutMs?: number;
}

/** ResolvedRetryPolicy is a RetryPolicy with every default filled in. */
export type ResolvedRetryPolicy = Required<RetryPolicy>;

/** resolveRetryPolicy fills in defaults and clamps nonsense to sane bounds. */
export function resolveRetryPolicy(p: RetryPolicy = {}): ResolvedRetryPolicy {
  const pos = (v: number | undefined, d: number) => (v !== undefined && v > 0 ? v : d);
  const initialBackoffMs = pos(p.initialBackoffMs, 50);
  return {
    maxAttempts: Math.max(1, Math.floor(pos(p.maxAttempts, 4))),
    initialBackoffMs,
    maxBackoffMs: Math.max(initialBackoffMs, pos(p.maxBackoffMs, 1000)),
    multiplier: Math.max(1, pos(p.multiplier, 2)),
    totalTimeoutMs: pos(p.totalTimeoutMs, 10_000),
  };
}

/**
 * backoffMs is the pause before attempt `attempt + 1` (attempt counts from 1):
 * "full jitter", uniform below an exponentially growing ceiling, so that many
 * clients cut off by one outage do not come back in lockstep — the formula
 * of every claimd client (clients/GUARD.md). random is injectable for tests.
 */
export function backoffMs(p: ResolvedRetryPolicy, attempt: number, random: () => number = Math.random): number {
  return Math.floor(backoffCeilingMs(p, attempt) * random());
}

/** backoffCeilingMs is the most backoffMs pauses before attempt `attempt + 1`. */
export function backoffCeilingMs(p: ResolvedRetryPolicy, attempt: number): number {
  return Math.min(p.maxBackoffMs, p.initialBackoffMs * p.multiplier ** (attempt - 1));
}

/** AttemptOptions is what one attempt of a call may use. */
export interface AttemptOptions {
  /** timeoutMs is this attempt's deadline, never past the call's total. */
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/**
 * withRetry runs attempt until it succeeds, fails with a non-transient error,
 * or the policy's attempts or total time run out. It rejects with a
 * ClaimdError. The caller's signal stops it at once.
 *
 * Retrying is safe for every claimd call: a Claim is retried with the same
 * attempt_id (the server then answers the same ACQUIRED and token), a
 * repeated Transition or Release with the same token succeeds and changes
 * nothing, a Renew extends the lease again, Get reads.
 */
export async function withRetry<T>(
  policy: ResolvedRetryPolicy,
  perAttemptTimeoutMs: number,
  signal: AbortSignal | undefined,
  attempt: (o: AttemptOptions) => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + policy.totalTimeoutMs;
  for (let n = 1; ; n++) {
    const left = deadline - Date.now();
    try {
      return await attempt({ timeoutMs: Math.max(1, Math.min(perAttemptTimeoutMs, left)), signal });
    } catch (e) {
      const err = toClaimdError(e);
      // A rate limit says when to come back. RESOURCE_EXHAUSTED without a
      // RetryInfo is something else (a message over a size limit), which
      // repeating does not change.
      const limited = err.code === Code.ResourceExhausted && err.retryAfterMs !== undefined;
      if (!(isTransient(err.code, err.reason) || limited) || signal?.aborted || n >= policy.maxAttempts) {
        throw err;
      }
      const pause = Math.max(backoffMs(policy, n), limited ? Math.ceil(err.retryAfterMs!) : 0);
      if (Date.now() + pause >= deadline) {
        throw err;
      }
      await pause_(pause, signal);
      if (signal?.aborted) {
        throw err;
      }
    }
  }
}

/** pause_ waits ms, or less when signal aborts (a backoff, not a sync point). */
function pause_(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
