package dev.claimd.client;

/**
 * PermanentException marks a handler failure that retrying cannot fix: the
 * guard moves the event to FAILED with the message as its result (capped at
 * {@link Guard#MAX_FAILURE_BYTES}) and answers 200, so the provider stops
 * retrying. Any other exception is retryable: the guard releases the key and
 * answers 500.
 */
public class PermanentException extends Exception {
  private static final long serialVersionUID = 1L;

  /** PermanentException with the failure text. */
  public PermanentException(String message) {
    super(message);
  }

  /** PermanentException with the failure text and its cause. */
  public PermanentException(String message, Throwable cause) {
    super(message, cause);
  }

  /** PermanentException of a cause: the failure text is the cause's message. */
  public PermanentException(Throwable cause) {
    super(cause == null ? null : cause.getMessage(), cause);
  }
}
