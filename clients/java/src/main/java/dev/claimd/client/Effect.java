package dev.claimd.client;

/**
 * Effect is the state of one delivery's effect fence (clients/GUARD.md,
 * "Exactly-once effects"), as {@link Guard.GuardContext#effect} found or left
 * it. Inside the work it is the handle for the result to store with the fence;
 * after it, {@link #done()} says whether an earlier holder had committed this
 * delivery's effect already (and then the work was not called), and {@link
 * #result()} is the effect's result either way.
 */
public final class Effect {
  /**
   * Work is the handler's writes, run in the fence's transaction on the
   * connection given to {@link Guard.GuardContext#effect}: use that connection,
   * do not commit, roll back or change its auto-commit, and throw to roll
   * everything back (the fence row too).
   */
  @FunctionalInterface
  public interface Work {
    /** run does the writes; {@code fx.setResult} stores the delivery's result with the fence. */
    void run(Effect fx) throws Exception;
  }

  private final boolean done;
  private final long fencingToken;
  private byte[] result;
  private boolean resultSet;

  Effect(boolean done, long fencingToken, byte[] result) {
    this.done = done;
    this.fencingToken = fencingToken;
    this.result = result;
  }

  /**
   * done reports whether the fence was committed before this effect: an earlier
   * holder did the writes and vanished before settling. The work was not called;
   * the guard settles with {@link #result()} and tells claimd it recovered it.
   */
  public boolean done() {
    return done;
  }

  /**
   * result is the effect's result: the stored one when {@link #done()}, else
   * the encoded value given to {@link #setResult} (null when none was). Return
   * it from the handler, so that this delivery and a recovery answer the same
   * bytes.
   */
  public byte[] result() {
    return result == null ? null : result.clone();
  }

  /** fencingToken is the token of the holder whose fence this is: an earlier holder's when done, else this one's. */
  public long fencingToken() {
    return fencingToken;
  }

  /**
   * setResult stores value with the fence, encoded by {@link Results#encode}
   * (bytes as they are, a string as UTF-8, null as empty, anything else as
   * compact JSON), in the same transaction as the writes.
   *
   * @throws IllegalStateException when the effect is done (its result is stored already)
   * @throws IllegalArgumentException when the value cannot be encoded
   */
  public void setResult(Object value) {
    if (done) {
      throw new IllegalStateException("claimd: the effect is done; its result is the stored one");
    }
    result = Results.encode(value);
    resultSet = true;
  }

  boolean resultSet() {
    return resultSet;
  }

  byte[] rawResult() {
    return result;
  }

  @Override
  public String toString() {
    return "Effect{done=" + done + ", fencingToken=" + Long.toUnsignedString(fencingToken)
        + ", result=" + (result == null ? "none" : result.length + " bytes") + "}";
  }
}
