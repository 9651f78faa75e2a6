package dev.claimd.client;

/**
 * NotRunException: {@link ClaimdClient#idempotent} did not run the function
 * because claimd answered something other than ACQUIRED or DUPLICATE: another
 * holder's live lease ({@code result().disposition()} IN_PROGRESS, {@code
 * result().retryAfter()} says when to retry), another payload under the key
 * (PAYLOAD_MISMATCH), an event of an entity lifecycle that came too early
 * (DEFERRED) or too late (SUPERSEDED).
 */
public final class NotRunException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final transient GuardResult result;

  NotRunException(GuardResult result) {
    super("claimd: " + result.disposition() + ": "
        + new String(result.body(), java.nio.charset.StandardCharsets.UTF_8).strip());
    this.result = result;
  }

  /** result is the guard's answer, as {@link ClaimdClient#guard} would return it. */
  public GuardResult result() {
    return result;
  }
}
