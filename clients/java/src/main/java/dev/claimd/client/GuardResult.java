package dev.claimd.client;

import java.util.OptionalLong;

/**
 * GuardResult is what {@link Guard} did with a delivery and what to answer the
 * provider (clients/GUARD.md, "Answers").
 *
 * @param status the HTTP status to answer
 * @param body the response body: the stored result for a settled or duplicate
 *     delivery, a short text otherwise
 * @param retryAfter the Retry-After header in whole seconds, present on 409 and
 *     503 only
 * @param disposition what happened
 * @param claim claimd's answer, null when claimd did not answer
 * @param ran whether the handler ran
 * @param error the error behind a non-2xx answer or a failed event (the
 *     handler's, or claimd's), or a note on a 200 (a result that could not be
 *     stored); null otherwise
 */
public record GuardResult(
    int status, byte[] body, OptionalLong retryAfter, Disposition disposition, Claim claim, boolean ran, Throwable error) {

  /** Disposition says what the guard did with a delivery. */
  public enum Disposition {
    /** DUPLICATE: settled or failed before; the handler did not run (200, the stored result). */
    DUPLICATE,
    /** IN_PROGRESS: another holder's lease is live; the handler did not run (409). */
    IN_PROGRESS,
    /** PAYLOAD_MISMATCH: the key was seen with another payload; the handler did not run (422). Alert on it. */
    PAYLOAD_MISMATCH,
    /** DEFERRED: the event came before its entity's prerequisite; the handler did not run (409, Retry-After from claimd's retry_after). */
    DEFERRED,
    /** SUPERSEDED: the event's entity moved past it; the handler did not run (200). */
    SUPERSEDED,
    /** UNAVAILABLE: claimd could not be asked, or rate-limits this receiver; the handler did not run (503). */
    UNAVAILABLE,
    /** REJECTED: claimd refused the delivery (400 for a bad delivery, 500 otherwise); the handler did not run. */
    REJECTED,
    /** SETTLED: the handler returned and the event is SETTLED, or the handler had ended it itself (200). */
    SETTLED,
    /** FAILED: the handler failed permanently and the event is FAILED (200). */
    FAILED,
    /** RELEASED: the handler failed retryably and the key was given back, or left to its lease when Release failed (500). */
    RELEASED,
    /** UNRELEASED: the handler failed retryably on a key taken over from PROCESSING, left to its lease (500). */
    UNRELEASED,
    /** TAKEN_OVER: another holder owns the key; nothing was written (409). */
    TAKEN_OVER,
    /** UNSETTLED: the handler finished but claimd could not record it; the event stays PROCESSING until its lease ends (503). */
    UNSETTLED
  }
}
