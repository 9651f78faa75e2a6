package dev.claimd.client;

/**
 * ResultNotStorableException: a guarded function's value cannot be stored (its
 * {@link Codec} failed, or it encodes to more than {@link Guard#MAX_RESULT_BYTES}).
 * {@link ClaimdClient#idempotent} throws it before anything is settled. A handler
 * that throws it is treated as one that returned: the key is neither released
 * nor settled empty, and waits for its lease (the side effect may have
 * happened), so the next delivery after the lease takes it over with state
 * PROCESSING. Fix the type (or the codec) rather than retry it.
 */
public final class ResultNotStorableException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** ResultNotStorableException says why, with the codec's error as the cause. */
  public ResultNotStorableException(String message, Throwable cause) {
    super(message, cause);
  }
}
