package dev.claimd.client;

import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Reason;
import dev.claimd.client.GuardResult.Disposition;
import io.grpc.Context;
import io.grpc.Status;
import java.lang.System.Logger.Level;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.OptionalLong;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Guard runs a webhook handler at most once per delivery, as far as claimd can
 * tell, and says what to answer the provider. It follows the contract every
 * claimd guard shares, clients/GUARD.md, whose table gives the status,
 * Retry-After and body of each way a delivery ends:
 *
 * <ul>
 *   <li>It claims the delivery with start set (entity_id and event_type pass
 *       through unchanged). DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH,
 *       DEFERRED and SUPERSEDED answer at once without running the handler; so
 *       does a claimd that refuses or cannot be reached.
 *   <li>ACQUIRED: the claim already recorded a new, released or
 *       window-expired key in PROCESSING; a LEASE_EXPIRED takeover keeps the
 *       state its vanished holder reached, so the guard moves it to PROCESSING
 *       (a no-op from PROCESSING). It renews the lease every third
 *       of it while the handler runs, and runs the handler on the calling
 *       thread. A return settles the event with the encoded result (200); a
 *       {@link PermanentException} fails it (200); any other exception releases
 *       the key so that the provider's retry runs the handler again (500) —
 *       except on a key taken over from a holder that had reached PROCESSING,
 *       which is left to its lease.
 *   <li>When a renewal finds that another holder owns the key, the handler is
 *       cancelled ({@link Context#isCancelled()} turns true and its thread is
 *       interrupted) and the delivery is answered 409, writing nothing.
 *   <li>Writes to the handler's own database go through {@link
 *       GuardContext#effect}: one transaction with the delivery's fence row.
 *       When the effect finds that an earlier holder committed it and vanished
 *       before settling (done), the guard settles with the fence's stored
 *       result, whatever the handler returned, and marks the Transition
 *       effect_recovered (GUARD.md row 23).
 * </ul>
 *
 * <p><b>Once the handler has returned, the guard never releases the claim:</b>
 * the side effect may have happened. A result that cannot be stored, a settle
 * that fails, an {@link Error} or an interruption in the handler all leave the
 * key to its lease; the next delivery then acquires it with LEASE_EXPIRED and
 * state PROCESSING, which tells that handler to check its own books first.
 * An {@link Error} thrown by the handler propagates; an {@link
 * InterruptedException} that the guard did not cause propagates as a {@link
 * CancellationException} with the thread's interrupt flag set again.
 */
public final class Guard {
  /** MAX_RESULT_BYTES is claimd's limit on a stored result: 64 KiB. */
  public static final int MAX_RESULT_BYTES = 65_536;
  /** MAX_FAILURE_BYTES bounds the failure text stored with FAILED: 1 KiB. */
  public static final int MAX_FAILURE_BYTES = 1_024;
  /** UNAVAILABLE_RETRY_AFTER_S is the Retry-After when claimd cannot be asked or could not record an outcome. */
  public static final int UNAVAILABLE_RETRY_AFTER_S = 5;
  /**
   * TAKEN_OVER_RETRY_AFTER_S is the Retry-After when another holder took the key
   * over (GUARD.md's SupersededRetryAfter): its lease is unknown here, and the
   * provider's retry then meets IN_PROGRESS with the right Retry-After.
   */
  public static final int TAKEN_OVER_RETRY_AFTER_S = 1;
  /** HEARTBEAT_DIVISOR: the lease is renewed every lease / HEARTBEAT_DIVISOR. */
  public static final int HEARTBEAT_DIVISOR = 3;
  /** MIN_HEARTBEAT is the shortest renewal interval, for very short leases. */
  public static final Duration MIN_HEARTBEAT = Duration.ofMillis(100);

  static final String IN_PROGRESS_BODY = "delivery in progress elsewhere; retry later\n";
  static final String MISMATCH_BODY = "payload differs from an earlier delivery with the same key\n";
  static final String REJECTED_BODY = "delivery rejected by claimd\n";
  static final String REFUSED_BODY = "claimd refused the delivery\n";
  static final String RATE_LIMITED_BODY = "claimd rate limit reached; retry later\n";
  static final String UNAVAILABLE_BODY = "claimd unavailable; retry later\n";
  static final String UNEXPECTED_BODY = "unexpected answer from claimd\n";
  static final String TAKEN_OVER_BODY = "delivery taken over by another holder; retry later\n";
  static final String PROCESSING_FAILED_BODY = "processing failed; retry later\n";
  static final String UNSETTLED_BODY = "could not record the outcome; retry later\n";
  static final String DEFERRED_BODY = "event arrived before its prerequisite; retry later\n";
  static final String SUPERSEDED_BODY = "event superseded by a later state of its entity\n";

  /** Handler does the side effect of one delivery that the caller owns. */
  @FunctionalInterface
  public interface Handler {
    /**
     * handle does the work and returns the result to store with the SETTLED
     * event and to answer this delivery and every duplicate with ({@link
     * Results#encode}: bytes as they are, a string as UTF-8, null as empty,
     * anything else as compact JSON). Throw {@link PermanentException} for a
     * failure retrying cannot fix; any other exception is retryable.
     *
     * <p>{@code ctx.claim()} tells how the key was acquired: after
     * LEASE_EXPIRED with state PROCESSING a previous holder may have done the
     * side effect, so check your own records before repeating it.
     */
    Object handle(GuardContext ctx) throws Exception;
  }

  /** GuardContext is what a handler gets: its claim, its lease, and whether it was cancelled. */
  public static final class GuardContext {
    private final Claim claim;
    private final Lease lease;
    private final ClaimdClient client;
    private final Thread thread;
    private final ReentrantLock lock = new ReentrantLock();
    private volatile ClaimdException lost;
    private boolean finished;
    private boolean interrupted;
    private final AtomicBoolean effectOpened = new AtomicBoolean();
    private volatile Effect effect;

    GuardContext(Claim claim, Lease lease, ClaimdClient client, Thread thread) {
      this.claim = claim;
      this.lease = lease;
      this.client = client;
      this.thread = thread;
    }

    /** claim is claimd's ACQUIRED answer: reason, state, fencing token. */
    public Claim claim() {
      return claim;
    }

    /** lease is the handler's handle for typed calls (e.g. to settle the event itself). */
    public Lease lease() {
      return lease;
    }

    /** client is the guard's client, for typed calls. */
    public ClaimdClient client() {
      return client;
    }

    /** isCancelled reports whether another holder took the key over: stop and return. */
    public boolean isCancelled() {
      return lost != null;
    }

    /** checkCancelled throws CancellationException when the handler was cancelled. */
    public void checkCancelled() {
      ClaimdException e = lost;
      if (e != null) {
        CancellationException c = new CancellationException("claimd: another holder took the key over");
        c.initCause(e);
        throw c;
      }
    }

    /**
     * effect runs {@code work} exactly once per delivery in connection's
     * database (clients/GUARD.md, "Exactly-once effects"): in one transaction
     * with a fence row for this delivery in {@code claimd_effects} (created on
     * first use), committed together. When an earlier holder committed this
     * delivery's fence and vanished before settling, the effect is {@link
     * Effect#done() done}: {@code work} is not called, and the guard settles
     * with the stored result whatever the handler returns (and tells claimd it
     * recovered it). Return {@code fx.result()} from the handler, so that both
     * answer the same bytes.
     *
     * <pre>
     * Effect fx = ctx.effect(connection, e -&gt; {
     *   try (PreparedStatement st = connection.prepareStatement("INSERT INTO ledger ...")) { ...; st.executeUpdate(); }
     *   e.setResult(Map.of("ledger_row", row));
     * });
     * return fx.result();
     * </pre>
     *
     * <p>PostgreSQL or SQLite (by the connection's product name). The effect
     * turns auto-commit off for its transaction and back on after (PostgreSQL;
     * a connection already outside auto-commit keeps its transaction, which the
     * effect commits); on SQLite it issues BEGIN IMMEDIATE, so writers queue at
     * the start, and needs auto-commit on. Anything {@code work} throws rolls
     * the writes and the fence back and propagates: the handler failed (a
     * {@link PermanentException} fails the event, anything else releases it).
     *
     * @throws IllegalStateException for a second effect in one delivery, or one
     *     after the handler returned
     * @throws CancellationException when another holder took the key over
     *     (before the transaction, or before its commit: then rolled back)
     */
    public Effect effect(Connection connection, Effect.Work work) throws Exception {
      Objects.requireNonNull(connection, "connection");
      Objects.requireNonNull(work, "work");
      lock.lock();
      try {
        if (finished) {
          throw new IllegalStateException("claimd: an effect only runs while the guard holds the claim");
        }
      } finally {
        lock.unlock();
      }
      if (!effectOpened.compareAndSet(false, true)) {
        throw new IllegalStateException("claimd: at most one effect per delivery");
      }
      Effect fx = Effects.run(connection, lease, this::isCancelled, work);
      effect = fx;
      return fx;
    }

    /**
     * effectKey is a stable idempotency key for {@code step} of this delivery,
     * for a downstream API's Idempotency-Key: see {@link Effects#effectKey}.
     */
    public String effectKey(String step) {
      return Effects.effectKey(lease.namespace(), lease.provider(), lease.key(), step);
    }

    /** cancel records the loss and interrupts the handler's thread while it runs. */
    void cancel(ClaimdException why) {
      lock.lock();
      try {
        if (lost == null) {
          lost = why;
        }
        if (!finished) {
          interrupted = true;
          thread.interrupt();
        }
      } finally {
        lock.unlock();
      }
    }

    /** finish ends the handler's run: no interrupt after it, and none of the guard's left set. */
    void finish() {
      lock.lock();
      try {
        finished = true;
        if (interrupted) {
          Thread.interrupted();
        }
      } finally {
        lock.unlock();
      }
    }
  }

  private final ClaimdClient client;

  Guard(ClaimdClient client) {
    this.client = client;
  }

  GuardResult run(ClaimRequest req, Handler handler) {
    Claim cl;
    try {
      // The handler runs right away: let the claim record PROCESSING, one
      // call and one durable write fewer per first delivery.
      cl = client.claim(req.getStart() ? req : req.toBuilder().setStart(true).build());
    } catch (ClaimdException e) {
      return failedCall(e, null);
    }
    switch (cl.outcome()) {
      case OUTCOME_ACQUIRED:
        return acquired(cl, handler);
      case OUTCOME_DUPLICATE:
        return answer(200, cl.result(), null, Disposition.DUPLICATE, cl, false, null);
      case OUTCOME_IN_PROGRESS:
        return answer(409, bytes(IN_PROGRESS_BODY), cl.retryAfterSeconds(client.clock().instant()), Disposition.IN_PROGRESS,
            cl, false, null);
      case OUTCOME_PAYLOAD_MISMATCH:
        client.logger().log(Level.ERROR, "claimd: payload mismatch: {0}/{1} key {2} (holder {3})",
            cl.namespace(), cl.provider(), cl.key(), cl.response().getHolder());
        return answer(422, bytes(MISMATCH_BODY), null, Disposition.PAYLOAD_MISMATCH, cl, false,
            new IllegalStateException("claimd: same key, different payload"));
      case OUTCOME_DEFERRED:
        return answer(409, bytes(DEFERRED_BODY), cl.retryAfterSeconds(client.clock().instant()), Disposition.DEFERRED, cl,
            false, null);
      case OUTCOME_SUPERSEDED:
        return answer(200, bytes(SUPERSEDED_BODY), null, Disposition.SUPERSEDED, cl, false, null);
      default:
        return answer(500, bytes(UNEXPECTED_BODY), null, Disposition.REJECTED, cl, false,
            new IllegalStateException("claimd: unexpected claim outcome " + cl.outcome()));
    }
  }

  /**
   * startedByClaim reports whether the claim (made with start) recorded
   * PROCESSING itself: a new, released or window-expired key. A LEASE_EXPIRED
   * takeover keeps the state its vanished holder reached, so the guard still
   * moves it to PROCESSING (a no-op from PROCESSING that checks the token).
   */
  private static boolean startedByClaim(Claim cl) {
    return cl.reason() != Reason.REASON_LEASE_EXPIRED && cl.state() == EventState.EVENT_STATE_PROCESSING;
  }

  private GuardResult acquired(Claim cl, Handler handler) {
    Lease lease = cl.lease();
    boolean keep = cl.takenOverFromProcessing();
    try {
      if (!startedByClaim(cl)) {
        client.start(lease);
      }
    } catch (ClaimdException e) {
      if (!notOurs(e) && !keep) {
        // The handler did not run: give the key back so that the provider's
        // retry need not wait out the lease. If this fails too, the lease does it.
        try {
          detached(() -> client.release(lease));
        } catch (ClaimdException re) {
          client.logger().log(Level.WARNING, "claimd: release after a failed start: " + lease, re);
        }
      }
      return failedCall(e, cl);
    }

    GuardContext ctx = new GuardContext(cl, lease, client, Thread.currentThread());
    Heartbeat hb = new Heartbeat(lease, cl.requestedLease(), every(cl.grantedLease()), ctx);
    Object value = null;
    Exception failure = null;
    try {
      value = handler.handle(ctx);
    } catch (Exception e) {
      failure = e;
    } finally {
      hb.stop();
      ctx.finish();
    }

    if (ctx.lost != null) {
      return takenOver(cl, ctx.lost, true);
    }
    if (failure instanceof InterruptedException) {
      // Interrupted from outside, not by the guard: like a panic, it leaves
      // the key to its lease and propagates.
      Thread.currentThread().interrupt();
      CancellationException c = new CancellationException("claimd: handler interrupted; the key is left to its lease");
      c.initCause(failure);
      throw c;
    }
    if (failure == null) {
      Effect fx = ctx.effect;
      if (fx != null && fx.done()) {
        // Row 23: an earlier holder committed this delivery's effect and
        // vanished; its stored result is the delivery's, whatever was returned.
        return record(cl, lease, settled(lease, fx.rawResult()).recovered());
      }
      return record(cl, lease, settled(lease, value));
    }
    if (failure instanceof ResultNotStorableException) {
      // The function returned (idempotent could not store its value): its side
      // effect may have happened, so the key is neither released nor settled
      // empty. It waits for its lease; the next holder takes over from PROCESSING.
      client.logger().log(Level.ERROR,
          "claimd: result cannot be stored; leaving the key to its lease: " + lease, failure);
      return answer(500, bytes(PROCESSING_FAILED_BODY), null, Disposition.UNRELEASED, cl, true, failure);
    }
    PermanentException permanent = permanentIn(failure);
    if (permanent != null) {
      return record(cl, lease, failed(permanent, failure));
    }
    // Logged here, once, with its stack trace: the guard turns the failure
    // into a 500 for the provider and returns it only in the result.
    if (keep) {
      client.logger().log(Level.ERROR,
          "claimd: handler failed after a takeover from PROCESSING; leaving the key to its lease: " + lease, failure);
      return answer(500, bytes(PROCESSING_FAILED_BODY), null, Disposition.UNRELEASED, cl, true, failure);
    }
    client.logger().log(Level.ERROR, "claimd: handler failed; releasing the key for a retry: " + lease, failure);
    try {
      detached(() -> client.release(lease));
    } catch (ClaimdException e) {
      if (notOurs(e)) {
        failure.addSuppressed(e);
        return takenOver(cl, failure, true);
      }
      // The lease hands the key over instead; the provider still retries on the 500.
      client.logger().log(Level.WARNING, "claimd: release failed; the key frees when its lease ends: " + lease, e);
      failure.addSuppressed(e);
    }
    return answer(500, bytes(PROCESSING_FAILED_BODY), null, Disposition.RELEASED, cl, true, failure);
  }

  /**
   * Outcome is what the guard records after the handler ran: the terminal
   * state, the bytes to store with it, the body to answer (all of a result,
   * even over the cap), and a note for the caller (a result not stored, the
   * handler's permanent failure).
   */
  private record Outcome(
      EventState to, byte[] stored, byte[] answer, Disposition disposition, Throwable note, boolean effectRecovered) {
    /** recovered marks a settle whose result came from an earlier holder's effect fence. */
    Outcome recovered() {
      return new Outcome(to, stored, answer, disposition, note, true);
    }
  }

  /** settled is row 13: the handler's value, encoded; stored only when it fits. */
  private Outcome settled(Lease lease, Object value) {
    byte[] answer;
    byte[] stored;
    Exception note = null;
    try {
      answer = Results.encode(value);
      stored = answer;
      if (answer.length > MAX_RESULT_BYTES) {
        // The side effect happened: recording that matters more than the
        // result, so settle without it.
        stored = new byte[0];
        note = new IllegalArgumentException(
            "claimd: result of " + answer.length + " bytes exceeds " + MAX_RESULT_BYTES + "; settled without it");
      }
    } catch (IllegalArgumentException e) {
      answer = new byte[0];
      stored = answer;
      note = e;
    }
    if (note != null) {
      client.logger().log(Level.WARNING, note.getMessage() + ": " + lease);
    }
    return new Outcome(EventState.EVENT_STATE_SETTLED, stored, answer, Disposition.SETTLED, note, false);
  }

  /** failed is row 14: the permanent failure's text, capped, stored and answered. */
  private static Outcome failed(PermanentException permanent, Exception failure) {
    byte[] text = Results.failureText(permanent, MAX_FAILURE_BYTES);
    return new Outcome(EventState.EVENT_STATE_FAILED, text, text, Disposition.FAILED, failure, false);
  }

  /**
   * record writes the outcome to claimd, the one way every outcome is written
   * (rows 13, 14, 17, 18, 19). A record already terminal under this token
   * means the handler ended the event itself: its stored outcome stands (200).
   */
  private GuardResult record(Claim cl, Lease lease, Outcome o) {
    Throwable note = o.note();
    try {
      detached(() -> client.transition(lease, o.to(), o.stored(), o.effectRecovered()));
    } catch (ClaimdException e) {
      if (!endedAlready(e)) {
        if (note != null) {
          e.addSuppressed(note);
        }
        return settleFailed(cl, e);
      }
      endedByHandler(lease, e);
      if (note != null) {
        note.addSuppressed(e);
      } else {
        note = e;
      }
    } catch (RuntimeException e) {
      if (note != null) {
        e.addSuppressed(note);
      }
      return unsettled(cl, e);
    }
    return answer(200, o.answer(), null, o.disposition(), cl, true, note);
  }

  /** failedCall is the answer to a claimd call that failed before the handler ran. */
  private GuardResult failedCall(ClaimdException e, Claim cl) {
    if (notOurs(e)) {
      return takenOver(cl, e, false);
    }
    if (e instanceof ClaimdException.Unavailable || e.code() == Status.Code.CANCELLED) {
      return answer(503, bytes(UNAVAILABLE_BODY), (long) UNAVAILABLE_RETRY_AFTER_S, Disposition.UNAVAILABLE, cl, false, e);
    }
    if (e instanceof ClaimdException.RateLimited) {
      // This receiver's principal is over its rate limit: come back when
      // claimd says a call is admitted again.
      long wait = e.retryDelay().isZero() ? UNAVAILABLE_RETRY_AFTER_S : Claim.ceilSeconds(e.retryDelay());
      return answer(503, bytes(RATE_LIMITED_BODY), wait, Disposition.UNAVAILABLE, cl, false, e);
    }
    if (rejectsDelivery(e)) {
      return answer(400, bytes(REJECTED_BODY), null, Disposition.REJECTED, cl, false, e);
    }
    // UNAUTHENTICATED, PERMISSION_DENIED, an unknown provider, an
    // INVALID_ARGUMENT naming the receiver's own settings (a lease over
    // max_lease: GUARD.md row 25): only an operator fixes them. A 500 (not a
    // 4xx) keeps the delivery at the provider, retried once they are fixed;
    // the handler did not run.
    client.logger().log(Level.ERROR, "claimd: call failed", e);
    return answer(500, bytes(REFUSED_BODY), null, Disposition.REJECTED, cl, false, e);
  }

  /**
   * DELIVERY_FIELDS are the ClaimRequest fields that carry what the provider
   * sent: an INVALID_ARGUMENT naming only these rejects the delivery itself
   * (GUARD.md row 4); any other field is the receiver's configuration (row 25).
   */
  static final List<String> DELIVERY_FIELDS = List.of(
      "ClaimRequest.delivery", "ClaimRequest.event_id", "ClaimRequest.key",
      "ClaimRequest.entity_id", "ClaimRequest.event_type");

  /**
   * rejectsDelivery reports whether e is an INVALID_ARGUMENT whose BadRequest
   * names only DELIVERY_FIELDS. One without a BadRequest is not: only what
   * claimd says was wrong with the delivery may tell a provider to stop retrying.
   */
  static boolean rejectsDelivery(ClaimdException e) {
    return e instanceof ClaimdException.InvalidArgument
        && !e.fields().isEmpty()
        && e.fields().stream().allMatch(f -> DELIVERY_FIELDS.stream()
            .anyMatch(d -> f.equals(d) || f.startsWith(d + " ") || f.startsWith(d + ".")));
  }

  private GuardResult takenOver(Claim cl, Throwable e, boolean ran) {
    return answer(409, bytes(TAKEN_OVER_BODY), (long) TAKEN_OVER_RETRY_AFTER_S, Disposition.TAKEN_OVER, cl, ran, e);
  }

  /** settleFailed answers a terminal transition that failed after the handler ran: never released. */
  private GuardResult settleFailed(Claim cl, ClaimdException e) {
    if (notOurs(e)) {
      return takenOver(cl, e, true);
    }
    return unsettled(cl, e);
  }

  /**
   * unsettled is row 19: recording the outcome failed after the handler ran (claimd's
   * error or any other, an interceptor's say). Nothing is released; the next delivery
   * takes over with state PROCESSING.
   */
  private GuardResult unsettled(Claim cl, Exception e) {
    client.logger().log(Level.ERROR, "claimd: recording the outcome failed after the handler ran; "
        + "the next delivery takes over with state PROCESSING: " + cl, e);
    return answer(503, bytes(UNSETTLED_BODY), (long) UNAVAILABLE_RETRY_AFTER_S, Disposition.UNSETTLED, cl, true, e);
  }

  private void endedByHandler(Lease lease, ClaimdException e) {
    client.logger().log(Level.WARNING, "claimd: the handler ended the event itself; its stored outcome stands: " + lease, e);
  }

  /** notOurs: another holder owns the key now, or the secret is not the owner's. Never settle or release then. */
  static boolean notOurs(ClaimdException e) {
    return e instanceof ClaimdException.StaleToken || e instanceof ClaimdException.NotOwner;
  }

  /**
   * endedAlready: the record is SETTLED or FAILED already under the guard's own
   * token, with another outcome or result: the handler ended the event itself.
   */
  static boolean endedAlready(ClaimdException e) {
    if (e instanceof ClaimdException.ResultMismatch) {
      return true;
    }
    if (!(e instanceof ClaimdException.InvalidTransition)) {
      return false;
    }
    String cur = e.metadata().getOrDefault("current_state", "");
    return cur.equals(EventState.EVENT_STATE_SETTLED.name()) || cur.equals(EventState.EVENT_STATE_FAILED.name());
  }

  private static PermanentException permanentIn(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof PermanentException p) {
        return p;
      }
      if (c.getCause() == c) {
        break;
      }
    }
    return null;
  }

  /** every is the heartbeat interval: a third of the lease, at least MIN_HEARTBEAT. */
  static Duration every(Duration lease) {
    Duration d = lease.dividedBy(HEARTBEAT_DIVISOR);
    return d.compareTo(MIN_HEARTBEAT) < 0 ? MIN_HEARTBEAT : d;
  }

  /**
   * detached runs a call outside the caller's gRPC Context: settle, fail and
   * release must outlive a request that was cancelled (a guard inside a gRPC
   * server's handler); the call's own retry policy bounds them.
   */
  private static void detached(Runnable r) {
    Context prev = Context.ROOT.attach();
    try {
      r.run();
    } finally {
      Context.ROOT.detach(prev);
    }
  }

  private static GuardResult answer(
      int status, byte[] body, Long retryAfter, Disposition d, Claim cl, boolean ran, Throwable err) {
    return new GuardResult(status, body, retryAfter == null ? OptionalLong.empty() : OptionalLong.of(retryAfter), d, cl, ran, err);
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Heartbeat renews a lease every interval while the handler runs. A renewal
   * that reports a stale token, a secret that is not the owner's or no record
   * cancels the handler and stops; INVALID_TRANSITION (the handler ended the
   * event itself) stops; anything else is logged and the next tick tries again
   * (a lapsed lease does not invalidate the token; only a takeover does).
   */
  private final class Heartbeat {
    private final Lease lease;
    private final Duration ask;
    private final Duration every;
    private final GuardContext ctx;
    private final ScheduledFuture<?> future;
    private final ReentrantLock tick = new ReentrantLock();
    private volatile boolean stopped;
    private volatile Context.CancellableContext inFlight;

    Heartbeat(Lease lease, Duration ask, Duration every, GuardContext ctx) {
      this.lease = lease;
      this.ask = ask;
      this.every = every;
      this.ctx = ctx;
      long n = every.toNanos();
      this.future = client.heartbeats().scheduleWithFixedDelay(this::renew, n, n, TimeUnit.NANOSECONDS);
    }

    private void renew() {
      tick.lock();
      try {
        if (stopped) {
          return;
        }
        // Up to two intervals: a slow renewal still lands before the lease ends.
        RetryPolicy p = client.retryPolicy().withTotalTimeout(every.multipliedBy(2))
            .withAttemptTimeout(min(client.retryPolicy().attemptTimeout(), every.multipliedBy(2)));
        Context.CancellableContext cc = Context.ROOT.withCancellation();
        inFlight = cc;
        try {
          cc.run(() -> client.renew(lease, ask, p));
        } catch (ClaimdException e) {
          if (stopped) {
            return;
          }
          if (notOurs(e) || e instanceof ClaimdException.NotFound) {
            ctx.cancel(e);
            future.cancel(false);
          } else if (e instanceof ClaimdException.InvalidTransition) {
            future.cancel(false); // terminal already: nothing left to renew
          } else {
            client.logger().log(Level.WARNING, "claimd: lease renewal failed: " + lease, e);
          }
        } finally {
          inFlight = null;
          cc.cancel(null);
        }
      } finally {
        tick.unlock();
      }
    }

    /** stop ends the renewals and waits for one in flight (cancelled) to end. */
    void stop() {
      stopped = true;
      future.cancel(false);
      Context.CancellableContext cc = inFlight;
      if (cc != null) {
        cc.cancel(null);
      }
      tick.lock();
      tick.unlock();
    }
  }

  private static Duration min(Duration a, Duration b) {
    return a.compareTo(b) <= 0 ? a : b;
  }
}
