package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import com.google.protobuf.Timestamp;
import dev.claimd.client.GuardResult.Disposition;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Record;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.MethodDescriptor;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client's duplicate cache (Builder.localCache), against a real claimd and on its own clock. */
class LocalCacheTest {
  static TestClaimd server;

  @BeforeAll
  static void start() throws Exception {
    server = TestClaimd.start();
  }

  @AfterAll
  static void stop() throws Exception {
    if (server != null) {
      assertEquals(0, server.stop(), () -> String.join("\n", server.logs()));
    }
  }

  /** Claims counts the Claim calls that reach the channel. */
  static final class Claims implements ClientInterceptor {
    final AtomicInteger n = new AtomicInteger();

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
      if (m.getFullMethodName().endsWith("/Claim")) {
        n.incrementAndGet();
      }
      return next.newCall(m, o);
    }
  }

  @Test
  void answersSettledDuplicatesWithoutAskingClaimd() throws Exception {
    Claims count = new Claims();
    try (ClaimdClient c = ClaimdClient.builder(server.target()).localCache(16).interceptor(count).logger(Quiet.LOGGER).build();
        ClaimdClient off = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build()) {
      ClaimRequest req = GuardTest.request(null).toBuilder()
          .setPayloadSha256(ByteString.copyFrom(Codec.payloadDigest(Map.of("amount", 10)))).build();
      assertEquals(Disposition.SETTLED, c.guard(req, ctx -> "ok").disposition());
      for (int i = 1; i <= 3; i++) {
        GuardResult r = c.guard(req, ctx -> "ran");
        assertEquals(Disposition.DUPLICATE, r.disposition(), "duplicate " + i);
        assertEquals("ok", new String(r.body(), StandardCharsets.UTF_8));
        assertTrue(r.claim().cached(), "duplicate " + i + " from the cache");
      }
      assertEquals(1, count.n.get(), "claims sent");

      ClaimRequest other = req.toBuilder().setPayloadSha256(ByteString.copyFrom(Codec.payloadDigest(Map.of("amount", 11)))).build();
      assertEquals(Disposition.PAYLOAD_MISMATCH, c.guard(other, ctx -> "x").disposition(), "another payload asks claimd");

      ClaimRequest settledElsewhere = GuardTest.request(null);
      off.guard(settledElsewhere, ctx -> "x");
      int before = count.n.get();
      assertFalse(c.claim(settledElsewhere).cached());
      assertTrue(c.claim(settledElsewhere).cached());
      assertEquals(1, count.n.get() - before, "learned from claimd once, then kept");
      assertFalse(off.claim(req).cached(), "off by default");
    }
  }

  @Test
  void boundedAndForgetsAtTheWindowsEnd() {
    Instant[] now = {Instant.parse("2026-12-03T09:00:00Z")};
    Clock clock = new Clock() {
      @Override public ZoneOffset getZone() { return ZoneOffset.UTC; }
      @Override public Clock withZone(java.time.ZoneId z) { return this; }
      @Override public Instant instant() { return now[0]; }
    };
    DuplicateCache d = new DuplicateCache(2, clock);
    java.util.function.BiFunction<String, Duration, Record> settled = (key, window) -> Record.newBuilder()
        .setNamespace("ns").setProvider("stripe").setKey(key).setState(EventState.EVENT_STATE_SETTLED)
        .setResult(ByteString.copyFromUtf8(key))
        .setWindowExpiresAt(Timestamp.newBuilder().setSeconds(now[0].plus(window).getEpochSecond())).build();
    java.util.function.Function<String, ClaimRequest> ask = id -> ClaimRequest.newBuilder().setNamespace("ns").setProvider("stripe").setEventId(id).build();
    d.rememberRecord(settled.apply("a", Duration.ofHours(1)));
    d.rememberRecord(settled.apply("b", Duration.ofHours(2)));
    assertEquals("a", d.lookup(ask.apply("a")).getResult().toStringUtf8());
    d.rememberRecord(settled.apply("c", Duration.ofHours(1)));
    assertNull(d.lookup(ask.apply("b")), "least recently used evicted");
    assertEquals(2, d.size());
    now[0] = now[0].plus(Duration.ofHours(1));
    assertNull(d.lookup(ask.apply("a")), "window ended");
    assertNull(d.lookup(ask.apply("c")), "window ended");
    d.rememberRecord(settled.apply("p", Duration.ofHours(1)).toBuilder().setState(EventState.EVENT_STATE_PROCESSING).build());
    d.rememberRecord(settled.apply("r", Duration.ofHours(1)).toBuilder().setReleased(true).build());
    d.rememberRecord(settled.apply("l", Duration.ofHours(1)).toBuilder().setLifecycle("charge").build());
    assertNull(d.lookup(ask.apply("p")));
    assertNull(d.lookup(ask.apply("r")));
    assertNull(d.lookup(ask.apply("l")));
    d.rememberRecord(settled.apply("s", Duration.ofHours(1)));
    assertNull(d.lookup(ask.apply("s").toBuilder().setEntityId("ch_1").setEventType("charge.succeeded").build()));
    assertNull(d.lookup(ask.apply("s").toBuilder().setScope("x").build()));
  }

  /**
   * A timed loop, not an assertion of speed: client CPU per duplicate against a
   * real claimd, with and without the cache, printed for the CHANGELOG.
   */
  @Test
  void measuresADuplicate() throws Exception {
    for (int size : new int[] {0, 1024}) {
      try (ClaimdClient c = ClaimdClient.builder(server.target()).localCache(size).logger(Quiet.LOGGER).build()) {
        ClaimRequest req = GuardTest.request(null);
        c.guard(req, ctx -> "ok");
        for (int i = 0; i < 300; i++) {
          c.guard(req, ctx -> "ran");
        }
        int n = 2000;
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        long cpu0 = mx.getCurrentThreadCpuTime();
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
          assertEquals(Disposition.DUPLICATE, c.guard(req, ctx -> "ran").disposition());
        }
        double wallUs = (System.nanoTime() - t0) / 1e3 / n;
        double cpuUs = (mx.getCurrentThreadCpuTime() - cpu0) / 1e3 / n;
        System.out.printf("localCache=%d: %.1f µs wall, %.1f µs CPU of the calling thread per duplicate (n=%d)%n", size, wallUs, cpuUs, n);
      }
    }
  }
}
