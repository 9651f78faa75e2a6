package dev.claimd.client;

import com.google.protobuf.ByteString;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.KeySource;
import dev.claimd.idempotency.v1.Outcome;
import dev.claimd.idempotency.v1.Record;
import java.time.Clock;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * DuplicateCache holds the settled answers of {@link ClaimdClient.Builder#localCache}:
 * a provider's retries of a delivery this client settled, or was told is a
 * DUPLICATE, are answered from memory instead of asking claimd. Only what cannot
 * change is kept: a SETTLED or FAILED record's answer, until its window ends
 * (window_expires_at on the client's clock). Nothing owned is kept (no ACQUIRED,
 * no IN_PROGRESS), so a cached answer never lets a handler run or keeps one from
 * running. Only claims by event id are answered from it, never one placed in an
 * entity lifecycle, and a claim whose payload_sha256 differs from the stored one
 * asks claimd (which answers PAYLOAD_MISMATCH). Least recently used entries go
 * first.
 */
final class DuplicateCache {
  private record Entry(ClaimResponse answer, ByteString payload, Instant expires) {}

  private final int size;
  private final Clock clock;
  private final LinkedHashMap<List<String>, Entry> entries;

  DuplicateCache(int size, Clock clock) {
    if (size <= 0) {
      throw new IllegalArgumentException("localCache: " + size + " must be > 0");
    }
    this.size = size;
    this.clock = clock;
    this.entries = new LinkedHashMap<>(16, 0.75f, true) {
      private static final long serialVersionUID = 1L;

      @Override
      protected boolean removeEldestEntry(Map.Entry<List<String>, Entry> eldest) {
        return size() > DuplicateCache.this.size;
      }
    };
  }

  /** lookup is the cached DUPLICATE answer to req, or null to ask claimd. */
  synchronized ClaimResponse lookup(ClaimRequest req) {
    if (!req.hasEventId() || !req.getEntityId().isEmpty()) {
      return null;
    }
    String key = req.getScope().isEmpty() ? req.getEventId() : req.getEventId() + "\u001f" + req.getScope();
    List<String> k = List.of(req.getNamespace(), req.getProvider(), key);
    Entry e = entries.get(k);
    if (e == null) {
      return null;
    }
    if (!clock.instant().isBefore(e.expires())) {
      entries.remove(k);
      return null;
    }
    if (!req.getPayloadSha256().isEmpty() && !e.payload().isEmpty() && !req.getPayloadSha256().equals(e.payload())) {
      return null;
    }
    return e.answer(); // protobuf messages are immutable
  }

  /** rememberClaim keeps a DUPLICATE answer claimd gave to req. */
  void rememberClaim(ClaimRequest req, ClaimResponse resp) {
    if (resp.getOutcome() != Outcome.OUTCOME_DUPLICATE || resp.getKeySource() != KeySource.KEY_SOURCE_EVENT_ID
        || !req.getEntityId().isEmpty() || resp.hasEntity()) {
      return;
    }
    put(List.of(req.getNamespace(), req.getProvider(), resp.getKey()), resp.toBuilder().clearLeaseSecret().build(), req.getPayloadSha256());
  }

  /** rememberRecord keeps a record this client settled or failed. */
  void rememberRecord(Record rec) {
    if (rec == null || rec.getReleased() || !rec.getLifecycle().isEmpty()
        || (rec.getState() != EventState.EVENT_STATE_SETTLED && rec.getState() != EventState.EVENT_STATE_FAILED)) {
      return;
    }
    ClaimResponse answer = ClaimResponse.newBuilder()
        .setOutcome(Outcome.OUTCOME_DUPLICATE)
        .setKey(rec.getKey())
        .setKeySource(KeySource.KEY_SOURCE_EVENT_ID)
        .setFencingToken(rec.getFencingToken())
        .setState(rec.getState())
        .setWindowExpiresAt(rec.getWindowExpiresAt())
        .setAttempt(rec.getAttempt())
        .setFirstSeenAt(rec.getFirstSeenAt())
        .setResult(rec.getResult())
        .setHolder(rec.getHolder())
        .build();
    put(List.of(rec.getNamespace(), rec.getProvider(), rec.getKey()), answer, rec.getPayloadSha256());
  }

  private void put(List<String> k, ClaimResponse answer, ByteString payload) {
    if (!answer.hasWindowExpiresAt()) {
      return;
    }
    Instant expires = Instant.ofEpochSecond(answer.getWindowExpiresAt().getSeconds(), answer.getWindowExpiresAt().getNanos());
    if (!clock.instant().isBefore(expires)) {
      return;
    }
    synchronized (this) {
      entries.put(k, new Entry(answer, payload, expires));
    }
  }

  synchronized int size() {
    return entries.size();
  }
}
