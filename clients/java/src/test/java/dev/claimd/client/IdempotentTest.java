package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonPrimitive;
import com.google.gson.JsonDeserializer;
import com.google.gson.JsonSerializer;
import com.google.protobuf.ByteString;
import dev.claimd.client.GuardResult.Disposition;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Record;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** ClaimdClient.idempotent, function mode, against a real claimd. */
class IdempotentTest {
  static TestClaimd server;
  static ClaimdClient client;

  @BeforeAll
  static void start() throws Exception {
    server = TestClaimd.start();
    client = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build();
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) {
      client.close();
    }
    if (server != null) {
      assertEquals(0, server.stop(), () -> String.join("\n", server.logs()));
    }
  }

  record Charge(String id, BigDecimal amount, Instant at) {}

  /** The codec's hooks: BigDecimal as exact text, Instant as ISO 8601. */
  static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping()
      .registerTypeAdapter(BigDecimal.class, (JsonSerializer<BigDecimal>) (v, t, c) -> new JsonPrimitive(v.toPlainString()))
      .registerTypeAdapter(BigDecimal.class, (JsonDeserializer<BigDecimal>) (j, t, c) -> new BigDecimal(j.getAsString()))
      .registerTypeAdapter(Instant.class, (JsonSerializer<Instant>) (v, t, c) -> new JsonPrimitive(v.toString()))
      .registerTypeAdapter(Instant.class, (JsonDeserializer<Instant>) (j, t, c) -> Instant.parse(j.getAsString()))
      .create();

  static Record record(ClaimRequest req) {
    return client.get(req.getNamespace(), req.getProvider(), req.getEventId() + (req.getScope().isEmpty() ? "" : "\u001f" + req.getScope()));
  }

  @Test
  void returnsTheTypedValueOnTheFirstCallAndOnDuplicates() throws Exception {
    ClaimRequest req = GuardTest.request(null);
    Codec<Charge> codec = Codec.json(Charge.class, GSON);
    Charge want = new Charge("ch_1", new BigDecimal("12.30"), Instant.parse("2026-12-03T08:00:00Z"));
    AtomicInteger runs = new AtomicInteger();
    for (int i = 1; i <= 3; i++) {
      Charge got = client.idempotent(req, codec, ctx -> {
        runs.incrementAndGet();
        return want;
      });
      assertEquals(want, got, "call " + i);
    }
    assertEquals(1, runs.get(), "runs");
    Record rec = record(req);
    assertEquals(EventState.EVENT_STATE_SETTLED, rec.getState());
    assertEquals("{\"id\":\"ch_1\",\"amount\":\"12.30\",\"at\":\"2026-12-03T08:00:00Z\"}", rec.getResult().toStringUtf8());
  }

  @Test
  void stringsAndBytesFollowTheResultRule() throws Exception {
    ClaimRequest req = GuardTest.request(null);
    assertEquals("paid", client.idempotent(req, Codec.json(String.class), ctx -> "paid"));
    assertEquals("paid", record(req).getResult().toStringUtf8());
    assertEquals("paid", client.idempotent(req, Codec.json(String.class), ctx -> "other"));
  }

  @Test
  void exceptionsPropagateAndAPermanentFailureStays() throws Exception {
    ClaimRequest req = GuardTest.request(null);
    AtomicInteger runs = new AtomicInteger();
    ClaimdClient.Function<Integer> flaky = ctx -> {
      if (runs.incrementAndGet() == 1) {
        throw new IllegalStateException("ledger unavailable");
      }
      return 7;
    };
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> client.idempotent(req, Codec.json(Integer.class), flaky));
    assertEquals("ledger unavailable", e.getMessage());
    assertEquals(7, client.idempotent(req, Codec.json(Integer.class), flaky), "after a released failure, fn runs again");

    ClaimRequest perm = GuardTest.request(null);
    for (int i = 1; i <= 2; i++) {
      PermanentException p = assertThrows(PermanentException.class,
          () -> client.idempotent(perm, Codec.json(Integer.class), ctx -> {
            throw new PermanentException("card_declined");
          }));
      assertEquals("card_declined", p.getMessage(), "call " + i);
    }
  }

  @Test
  void aValueThatCannotBeStoredThrowsBeforeSettlingAndLeavesTheKeyToItsLease() throws Exception {
    Map<String, Object> nan = new LinkedHashMap<>();
    nan.put("x", Double.NaN);
    for (Object value : List.of(nan, "x".repeat(Guard.MAX_RESULT_BYTES + 1))) {
      ClaimRequest req = GuardTest.request(null);
      Codec<Object> codec = Codec.json(Object.class);
      assertThrows(ResultNotStorableException.class, () -> client.idempotent(req, codec, ctx -> value));
      Record rec = record(req);
      assertEquals(EventState.EVENT_STATE_PROCESSING, rec.getState());
      assertFalse(rec.getReleased());
      assertEquals(0, rec.getResult().size(), "nothing stored");
      NotRunException again = assertThrows(NotRunException.class, () -> client.idempotent(req, codec, ctx -> "x"));
      assertEquals(Disposition.IN_PROGRESS, again.result().disposition());
    }
  }

  @Test
  void payloadDigestCatchesAChangedPartOnly() throws Exception {
    ClaimRequest base = GuardTest.request(null);
    ClaimRequest a = base.toBuilder().setPayloadSha256(ByteString.copyFrom(Codec.payloadDigest(Map.of("amount", 10, "currency", "eur")))).build();
    Map<String, Object> reordered = new LinkedHashMap<>();
    reordered.put("currency", "eur");
    reordered.put("amount", 10);
    ClaimRequest same = base.toBuilder().setPayloadSha256(ByteString.copyFrom(Codec.payloadDigest(reordered))).build();
    ClaimRequest other = base.toBuilder().setPayloadSha256(ByteString.copyFrom(Codec.payloadDigest(Map.of("amount", 11, "currency", "eur")))).build();
    assertEquals("ok", client.idempotent(a, Codec.json(String.class), ctx -> "ok"));
    assertEquals("ok", client.idempotent(same, Codec.json(String.class), ctx -> "again"));
    NotRunException e = assertThrows(NotRunException.class, () -> client.idempotent(other, Codec.json(String.class), ctx -> "x"));
    assertEquals(Disposition.PAYLOAD_MISMATCH, e.result().disposition());
    assertArrayEquals(Codec.payloadDigest(Map.of("a", 1)), Codec.payloadDigest(Map.of("a", 1)));
  }

  @Test
  void scopeKeepsTwoFunctionsApartAndWindowIsTheClaimsWindow() throws Exception {
    ClaimRequest base = GuardTest.request(null);
    Duration week = Duration.ofDays(7);
    ClaimRequest email = base.toBuilder().setScope("email").setWindow(ClaimdClient.protoDuration(week)).build();
    ClaimRequest ledger = base.toBuilder().setScope("ledger").build();
    assertEquals("mailed", client.idempotent(email, Codec.json(String.class), ctx -> "mailed"));
    assertEquals("booked", client.idempotent(ledger, Codec.json(String.class), ctx -> "booked"));
    Record rec = record(email);
    assertEquals(week.toSeconds(), rec.getWindowExpiresAt().getSeconds() - rec.getFirstSeenAt().getSeconds());
    ClaimRequest shortWindow = GuardTest.request(null).toBuilder().setWindow(ClaimdClient.protoDuration(Duration.ofHours(1))).build();
    ClaimdException e = assertThrows(ClaimdException.class, () -> client.idempotent(shortWindow, Codec.json(String.class), ctx -> "x"));
    assertTrue(e.getMessage().contains("ClaimRequest.window"), e.getMessage());
  }

  @Test
  void aDuplicateDecodesAsTheDeclaredType() throws Exception {
    ClaimRequest req = GuardTest.request(null);
    byte[] raw = "{\"id\":\"ch_2\",\"amount\":\"1.5\",\"at\":\"2026-01-01T00:00:00Z\"}".getBytes(StandardCharsets.UTF_8);
    client.guard(req, ctx -> raw);
    Charge got = client.idempotent(req, Codec.json(Charge.class, GSON), ctx -> null);
    assertEquals(new Charge("ch_2", new BigDecimal("1.5"), Instant.parse("2026-01-01T00:00:00Z")), got);
  }
}
