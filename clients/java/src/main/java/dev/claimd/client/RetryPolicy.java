package dev.claimd.client;

import java.time.Duration;
import java.util.Objects;
import java.util.function.DoubleSupplier;

/**
 * RetryPolicy bounds the client's own retries of a call (clients/GUARD.md, "The
 * client's own retries"): a call that failed with UNAVAILABLE, or whose attempt
 * ran out of its own timeout while the call still had time, is sent again; so
 * is one refused with RESOURCE_EXHAUSTED and a google.rpc.RetryInfo (a rate
 * limit: nothing was written), after at least that delay. Every claimd call is
 * safe to repeat: a Claim is repeated with the same attempt_id, and Transition,
 * Renew and Release are no-ops when repeated with the same token, secret and
 * result.
 *
 * @param maxAttempts counts the first attempt; 1 disables retries
 * @param baseBackoff bounds the pause before the first retry; the bound doubles
 *     per retry, and the pause is uniform below it ("full jitter")
 * @param maxBackoff caps the bound
 * @param totalTimeout bounds the whole call, pauses included
 * @param attemptTimeout bounds one attempt (a Claim's wait is added on top)
 */
public record RetryPolicy(
    int maxAttempts, Duration baseBackoff, Duration maxBackoff, Duration totalTimeout, Duration attemptTimeout) {

  /** DEFAULT is the contract's: 4 attempts, 50 ms doubling to 1 s, 10 s in all, 5 s per attempt. */
  public static final RetryPolicy DEFAULT =
      new RetryPolicy(4, Duration.ofMillis(50), Duration.ofSeconds(1), Duration.ofSeconds(10), Duration.ofSeconds(5));

  /** NONE makes a single attempt, with the default timeouts. */
  public static final RetryPolicy NONE = DEFAULT.withMaxAttempts(1);

  /** The multiplier of the backoff bound per retry. */
  public static final int MULTIPLIER = 2;

  /** RetryPolicy checks its fields. */
  public RetryPolicy {
    Objects.requireNonNull(baseBackoff, "baseBackoff");
    Objects.requireNonNull(maxBackoff, "maxBackoff");
    Objects.requireNonNull(totalTimeout, "totalTimeout");
    Objects.requireNonNull(attemptTimeout, "attemptTimeout");
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1");
    }
    if (baseBackoff.isNegative() || maxBackoff.compareTo(baseBackoff) < 0) {
      throw new IllegalArgumentException("want 0 <= baseBackoff <= maxBackoff");
    }
    if (totalTimeout.isNegative() || totalTimeout.isZero() || attemptTimeout.isNegative() || attemptTimeout.isZero()) {
      throw new IllegalArgumentException("timeouts must be positive");
    }
  }

  /** withMaxAttempts returns this policy with another number of attempts. */
  public RetryPolicy withMaxAttempts(int n) {
    return new RetryPolicy(n, baseBackoff, maxBackoff, totalTimeout, attemptTimeout);
  }

  /** withTotalTimeout returns this policy with another bound on the whole call. */
  public RetryPolicy withTotalTimeout(Duration d) {
    return new RetryPolicy(maxAttempts, baseBackoff, maxBackoff, d, attemptTimeout);
  }

  /** withAttemptTimeout returns this policy with another bound on one attempt. */
  public RetryPolicy withAttemptTimeout(Duration d) {
    return new RetryPolicy(maxAttempts, baseBackoff, maxBackoff, totalTimeout, d);
  }

  /**
   * backoffCeiling is the longest pause before retry {@code n} (1 for the
   * first retry): min(maxBackoff, baseBackoff × 2^(n−1)).
   */
  public Duration backoffCeiling(int n) {
    Duration d = baseBackoff;
    for (int i = 1; i < n && d.compareTo(maxBackoff) < 0; i++) {
      d = d.multipliedBy(MULTIPLIER);
    }
    return d.compareTo(maxBackoff) < 0 ? d : maxBackoff;
  }

  /**
   * backoff draws the pause before retry {@code n}, uniform in [0,
   * backoffCeiling(n)], so that receivers cut off by one outage do not come
   * back in lockstep. {@code random} returns values in [0, 1).
   */
  public Duration backoff(int n, DoubleSupplier random) {
    return Duration.ofNanos((long) (backoffCeiling(n).toNanos() * random.getAsDouble()));
  }
}
