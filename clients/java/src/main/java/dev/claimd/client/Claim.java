package dev.claimd.client;

import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Outcome;
import dev.claimd.idempotency.v1.Reason;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;

/**
 * Claim is claimd's answer to a Claim, with what the answer alone does not say:
 * the namespace and provider it was asked in, the lease asked for, and when it
 * was asked (to measure the lease claimd granted).
 */
public final class Claim {
  private final String namespace;
  private final String provider;
  private final ClaimResponse response;
  private final Duration requestedLease;
  private final Instant askedAt;
  private final boolean cached;

  Claim(String namespace, String provider, ClaimResponse response, Duration requestedLease, Instant askedAt) {
    this(namespace, provider, response, requestedLease, askedAt, false);
  }

  Claim(String namespace, String provider, ClaimResponse response, Duration requestedLease, Instant askedAt, boolean cached) {
    this.cached = cached;
    this.namespace = namespace;
    this.provider = provider;
    this.response = Objects.requireNonNull(response, "response");
    this.requestedLease = requestedLease;
    this.askedAt = askedAt;
  }

  /** cached reports that the answer came from the client's duplicate cache ({@link ClaimdClient.Builder#localCache}), not from claimd. */
  public boolean cached() {
    return cached;
  }

  /** response is the ClaimResponse as claimd sent it. */
  public ClaimResponse response() {
    return response;
  }

  /** namespace is the namespace of the claim. */
  public String namespace() {
    return namespace;
  }

  /** provider is the provider of the claim. */
  public String provider() {
    return provider;
  }

  /** outcome is the decision. */
  public Outcome outcome() {
    return response.getOutcome();
  }

  /** acquired: the caller owns the delivery and must do the work. */
  public boolean acquired() {
    return outcome() == Outcome.OUTCOME_ACQUIRED;
  }

  /** duplicate: settled or failed within the window; answer the stored result. */
  public boolean duplicate() {
    return outcome() == Outcome.OUTCOME_DUPLICATE;
  }

  /** inProgress: another holder's lease is live. */
  public boolean inProgress() {
    return outcome() == Outcome.OUTCOME_IN_PROGRESS;
  }

  /** payloadMismatch: the key was seen with another payload; alert. */
  public boolean payloadMismatch() {
    return outcome() == Outcome.OUTCOME_PAYLOAD_MISMATCH;
  }

  /** deferred: the event arrived before its entity's prerequisite; redeliver after retryAfter. */
  public boolean deferred() {
    return outcome() == Outcome.OUTCOME_DEFERRED;
  }

  /** superseded: the event's entity can no longer reach a state the event may arrive in; acknowledge. */
  public boolean superseded() {
    return outcome() == Outcome.OUTCOME_SUPERSEDED;
  }

  /** reason says why an ACQUIRED claim was acquired. */
  public Reason reason() {
    return response.getReason();
  }

  /** state is the record's state; after LEASE_EXPIRED, the state the vanished holder reached. */
  public EventState state() {
    return response.getState();
  }

  /** key is the canonical key (scope included). */
  public String key() {
    return response.getKey();
  }

  /** fencingToken is the owner's fencing token (ACQUIRED only). */
  public long fencingToken() {
    return response.getFencingToken();
  }

  /** result is the stored result a DUPLICATE carries. */
  public byte[] result() {
    return response.getResult().toByteArray();
  }

  /**
   * takenOverFromProcessing reports whether the key was taken over from a holder
   * that had reached PROCESSING (ACQUIRED, LEASE_EXPIRED, PROCESSING): that
   * holder may have done the side effect, so the handler checks its own books
   * first, and a guard never releases such a key.
   */
  public boolean takenOverFromProcessing() {
    return acquired() && reason() == Reason.REASON_LEASE_EXPIRED && state() == EventState.EVENT_STATE_PROCESSING;
  }

  /**
   * lease is the owner's handle on the record, for Transition, Renew and
   * Release.
   *
   * @throws IllegalStateException when the claim was not ACQUIRED
   */
  public Lease lease() {
    if (!acquired()) {
      throw new IllegalStateException("claimd: no lease: the claim was " + outcome());
    }
    return new Lease(namespace, provider, response.getKey(), response.getFencingToken(), response.getLeaseSecret());
  }

  /** requestedLease is the lease the claim asked for, null for the provider's default. */
  public Duration requestedLease() {
    return requestedLease;
  }

  /**
   * grantedLease is the lease claimd granted, measured from when the claim was
   * asked: the requested one when given, else lease_expires_at minus that time.
   */
  public Duration grantedLease() {
    if (requestedLease != null) {
      return requestedLease;
    }
    var t = response.getLeaseExpiresAt();
    return Duration.between(askedAt, Instant.ofEpochSecond(t.getSeconds(), t.getNanos()));
  }

  /**
   * retryAfterSeconds is how long a provider should wait before redelivering,
   * in whole seconds, at least 1: for IN_PROGRESS what is left of the holder's
   * lease at {@code now}, rounded up; for DEFERRED claimd's retry_after, rounded
   * up.
   */
  public long retryAfterSeconds(Instant now) {
    Duration d;
    if (deferred()) {
      var ra = response.getRetryAfter();
      d = Duration.ofSeconds(ra.getSeconds(), ra.getNanos());
    } else {
      var t = response.getLeaseExpiresAt();
      d = Duration.between(now, Instant.ofEpochSecond(t.getSeconds(), t.getNanos()));
    }
    return ceilSeconds(d);
  }

  /** ceilSeconds rounds d up to whole seconds, at least 1. */
  static long ceilSeconds(Duration d) {
    long s = d.getSeconds() + (d.getNano() > 0 ? 1 : 0);
    return Math.max(s, 1);
  }

  /** leaseSecret is kept out of toString: see {@link Lease}. */
  @Override
  public String toString() {
    return "Claim{" + namespace + "/" + provider + "/" + key() + " " + outcome()
        + (acquired() ? " " + reason() + " token " + Long.toUnsignedString(fencingToken()) : "") + "}";
  }
}
