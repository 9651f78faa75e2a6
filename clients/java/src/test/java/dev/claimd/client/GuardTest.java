package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import com.google.protobuf.ByteString;
import dev.claimd.client.GuardResult.Disposition;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Outcome;
import dev.claimd.idempotency.v1.Reason;
import dev.claimd.idempotency.v1.Record;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall.SimpleForwardingClientCall;
import io.grpc.ForwardingClientCallListener.SimpleForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** What the guardspec cannot express in every language: Java's own cases, and the lifecycle outcomes. */
class GuardTest {
  static final String NS = "java-guard-test";
  static TestClaimd server;
  static ClaimdClient plain;

  @BeforeAll
  static void start() throws Exception {
    server = TestClaimd.start();
    plain = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build();
  }

  @AfterAll
  static void stop() throws Exception {
    if (plain != null) {
      plain.close();
    }
    if (server != null) {
      int code = server.stop();
      assertEquals(0, code, () -> "claimd's exit code; its last lines:\n" + String.join("\n", server.logs()));
    }
  }

  static ClaimRequest request(Duration lease) {
    ClaimRequest.Builder b = ClaimRequest.newBuilder().setNamespace(NS).setProvider("stripe")
        .setEventId("evt_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8)));
    if (lease != null) {
      b.setLease(ClaimdClient.protoDuration(lease));
    }
    return b.build();
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  // --- results --------------------------------------------------------------------

  @Test
  void resultsAreEncodedByTheSharedRule() {
    assertArrayEquals(new byte[0], Results.encode(null));
    assertArrayEquals(new byte[] {0, -1}, Results.encode(new byte[] {0, -1}));
    assertArrayEquals(new byte[] {1, 2}, Results.encode(ByteBuffer.wrap(new byte[] {9, 1, 2}, 1, 2)));
    assertArrayEquals(new byte[] {3}, Results.encode(ByteString.copyFrom(new byte[] {3})));
    assertArrayEquals(utf8("charged ✓"), Results.encode("charged ✓"));
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("z", 1);
    m.put("a", "é <&>\u2028");
    m.put("n", null);
    m.put("l", List.of(true, 1.5));
    assertEquals("{\"z\":1,\"a\":\"é <&>\u2028\",\"n\":null,\"l\":[true,1.5]}", new String(Results.encode(m), StandardCharsets.UTF_8));
    record Charge(String id, long amount) {}
    assertEquals("{\"id\":\"ch_1\",\"amount\":100}", new String(Results.encode(new Charge("ch_1", 100)), StandardCharsets.UTF_8));
    assertEquals("{\"a\":\"\\\\u2028\"}", new String(Results.encode(JsonParser.parseString("{\"a\":\"\\\\u2028\"}")), StandardCharsets.UTF_8),
        "an escaped backslash before u2028 stays escaped");
    assertThrows(IllegalArgumentException.class, () -> Results.encode("lone \ud800 surrogate"));
    assertThrows(IllegalArgumentException.class, () -> Results.encode(List.of(Double.NaN)));
    assertThrows(IllegalArgumentException.class, () -> Results.encode(Map.of("x", Double.POSITIVE_INFINITY)));
    List<Object> cycle = new ArrayList<>();
    cycle.add(cycle);
    assertThrows(IllegalArgumentException.class, () -> Results.encode(cycle));
  }

  @Test
  void failureTextIsCappedOnACharacterBoundary() {
    byte[] t = Results.failureText(new PermanentException("card_declined: " + "é".repeat(2000)), Guard.MAX_FAILURE_BYTES);
    assertArrayEquals(utf8("card_declined: " + "é".repeat(504)), t);
    assertArrayEquals(utf8("IllegalStateException"), Results.failureText(new IllegalStateException(), 1024));
    assertArrayEquals(utf8("😀"), Results.failureText(new Exception("😀😀"), 5));
  }

  // --- what only Java has ------------------------------------------------------------

  @Test
  void anErrorInTheHandlerPropagatesAndLeavesTheKeyToItsLease() {
    ClaimRequest req = request(Duration.ofSeconds(60));
    try (ClaimdClient c = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build()) {
      assertThrows(StackOverflowError.class, () -> c.guard(req, ctx -> {
        throw new StackOverflowError("deep");
      }));
    }
    Record rec = plain.get(NS, "stripe", req.getEventId());
    assertEquals(EventState.EVENT_STATE_PROCESSING, rec.getState());
    assertFalse(rec.getReleased(), "an interrupted handler's key must not be released");
  }

  @Test
  void anInterruptTheGuardDidNotCausePropagatesAndLeavesTheKeyToItsLease() {
    ClaimRequest req = request(Duration.ofSeconds(60));
    try (ClaimdClient c = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build()) {
      CancellationException e = assertThrows(CancellationException.class, () -> c.guard(req, ctx -> {
        throw new InterruptedException("shutting down");
      }));
      assertInstanceOf(InterruptedException.class, e.getCause());
      assertTrue(Thread.interrupted(), "the interrupt flag is set again (and cleared here)");
    }
    Record rec = plain.get(NS, "stripe", req.getEventId());
    assertEquals(EventState.EVENT_STATE_PROCESSING, rec.getState());
    assertFalse(rec.getReleased());
  }

  /** Recording keeps what is logged at ERROR: the message and the throwable. */
  static final class Recording implements System.Logger {
    final List<String> messages = new ArrayList<>();
    final List<Throwable> thrown = new ArrayList<>();

    @Override
    public String getName() {
      return "recording";
    }

    @Override
    public boolean isLoggable(Level level) {
      return level.getSeverity() >= Level.ERROR.getSeverity();
    }

    @Override
    public synchronized void log(Level level, java.util.ResourceBundle bundle, String msg, Throwable t) {
      if (isLoggable(level)) {
        messages.add(msg);
        thrown.add(t);
      }
    }

    @Override
    public synchronized void log(Level level, java.util.ResourceBundle bundle, String format, Object... params) {
      if (isLoggable(level)) {
        messages.add(java.text.MessageFormat.format(format, params));
        thrown.add(null);
      }
    }
  }

  @Test
  void aHandlersExceptionIsLoggedOnceAtErrorWithTheKey() {
    record Case(String desc, Exception thrown, int want) {}
    for (Case tc : List.of(
        new Case("an exception", new IllegalStateException("ledger database down"), 1),
        new Case("a permanent failure", new PermanentException("account closed"), 0))) {
      ClaimRequest req = request(null);
      Recording log = new Recording();
      try (ClaimdClient c = ClaimdClient.builder(server.target()).logger(log).build()) {
        GuardResult r = c.guard(req, ctx -> {
          throw tc.thrown();
        });
        assertEquals(tc.thrown(), r.error(), tc.desc());
      }
      assertEquals(tc.want(), log.messages.size(), () -> tc.desc() + ": ERROR lines " + log.messages);
      for (int i = 0; i < log.messages.size(); i++) {
        String msg = log.messages.get(i);
        assertTrue(msg.contains(req.getEventId()), () -> tc.desc() + ": logged " + msg + ", want the key");
        assertEquals(tc.thrown(), log.thrown.get(i), tc.desc());
      }
    }
  }

  @Test
  void aPermanentFailureWrappedInAnotherExceptionStillFailsTheEvent() {
    ClaimRequest req = request(null);
    GuardResult r = plain.guard(req, ctx -> {
      throw new RuntimeException("wrapped", new PermanentException("account closed"));
    });
    assertEquals(200, r.status());
    assertEquals(Disposition.FAILED, r.disposition());
    assertArrayEquals(utf8("account closed"), r.body());
    assertEquals(EventState.EVENT_STATE_FAILED, plain.get(NS, "stripe", req.getEventId()).getState());
  }

  @Test
  void aTakeoverCancelsTheHandlerAndLeavesNoInterruptBehind() throws Exception {
    ClaimRequest req = request(Duration.ofMillis(600));
    boolean[] sawCancel = new boolean[1];
    GuardResult r = plain.guard(req, ctx -> {
      plain.release(ctx.lease());
      assertTrue(plain.claim(req.toBuilder().clearLease().setHolder("taker").build()).acquired());
      try {
        Thread.sleep(10_000);
      } catch (InterruptedException e) {
        sawCancel[0] = ctx.isCancelled();
      }
      ctx.checkCancelled();
      return "must not be stored";
    });
    assertTrue(sawCancel[0], "the handler's thread was interrupted by the takeover");
    assertEquals(409, r.status());
    assertEquals(Disposition.TAKEN_OVER, r.disposition());
    assertTrue(r.ran());
    assertFalse(Thread.currentThread().isInterrupted(), "the guard's own interrupt leaked to the caller");
  }

  @Test
  void anUnencodableResultIsSettledEmptyAndNeverReleased() {
    ClaimRequest req = request(null);
    GuardResult r = plain.guard(req, ctx -> List.of(Double.NaN));
    assertEquals(200, r.status());
    assertArrayEquals(new byte[0], r.body());
    assertInstanceOf(IllegalArgumentException.class, r.error());
    Record rec = plain.get(NS, "stripe", req.getEventId());
    assertEquals(EventState.EVENT_STATE_SETTLED, rec.getState());
    assertEquals(0, rec.getResult().size());
  }

  @Test
  void concurrentDeliveriesOfOneEventRunTheHandlerOnce() throws Exception {
    ClaimRequest req = request(Duration.ofSeconds(30));
    int n = 8;
    java.util.concurrent.CountDownLatch othersAnswered = new java.util.concurrent.CountDownLatch(n - 1);
    java.util.concurrent.atomic.AtomicInteger runs = new java.util.concurrent.atomic.AtomicInteger();
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(n);
    try {
      List<java.util.concurrent.Future<GuardResult>> results = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        results.add(pool.submit(() -> {
          GuardResult r = plain.guard(req, ctx -> {
            runs.incrementAndGet();
            // The owner finishes only once every other delivery was answered:
            // they met its live lease, not its result.
            if (!othersAnswered.await(20, java.util.concurrent.TimeUnit.SECONDS)) {
              throw new IllegalStateException("the other deliveries were not answered");
            }
            return "once";
          });
          if (!r.ran()) {
            othersAnswered.countDown();
          }
          return r;
        }));
      }
      int ok = 0;
      int inProgress = 0;
      for (java.util.concurrent.Future<GuardResult> f : results) {
        GuardResult r = f.get(30, java.util.concurrent.TimeUnit.SECONDS);
        if (r.status() == 200) {
          ok++;
          assertArrayEquals(utf8("once"), r.body());
        } else {
          assertEquals(409, r.status(), () -> String.valueOf(r.error()));
          assertEquals(Disposition.IN_PROGRESS, r.disposition());
          assertTrue(r.retryAfter().getAsLong() >= 1);
          inProgress++;
        }
      }
      assertEquals(1, runs.get(), "handler runs");
      assertEquals(List.of(1, n - 1), List.of(ok, inProgress));
    } finally {
      pool.shutdownNow();
    }
  }

  // --- the lifecycle outcomes, answers rewritten (the guardspec has them from claimd itself) ---

  /** Rewrite replaces claimd's Claim answer with another. */
  static final class Rewrite implements ClientInterceptor {
    final UnaryOperator<ClaimResponse> f;

    Rewrite(UnaryOperator<ClaimResponse> f) {
      this.f = f;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
      if (!m.getFullMethodName().equals(ClaimdMethods.CLAIM.getFullMethodName())) {
        return next.newCall(m, o);
      }
      return new SimpleForwardingClientCall<>(next.newCall(m, o)) {
        @Override
        public void start(Listener<R> l, Metadata h) {
          super.start(new SimpleForwardingClientCallListener<>(l) {
            @Override
            @SuppressWarnings("unchecked")
            public void onMessage(R message) {
              super.onMessage((R) f.apply((ClaimResponse) message));
            }
          }, h);
        }
      };
    }
  }

  @Test
  void deferredWithoutARetryAfterIsToldToComeBackInASecond() {
    Rewrite rw = new Rewrite(r -> ClaimResponse.newBuilder().setOutcome(Outcome.OUTCOME_DEFERRED).setKey(r.getKey()).build());
    try (ClaimdClient c = ClaimdClient.builder(server.target()).interceptor(rw).logger(Quiet.LOGGER).build()) {
      GuardResult r = c.guard(request(null), ctx -> "no");
      assertEquals(409, r.status());
      assertEquals(1, r.retryAfter().getAsLong());
    }
  }

  @Test
  void deferredIsARetryableAnswerWithClaimdsRetryAfterAndRunsNothing() {
    Rewrite rw = new Rewrite(r -> ClaimResponse.newBuilder().setOutcome(Outcome.OUTCOME_DEFERRED).setKey(r.getKey())
        .setRetryAfter(ClaimdClient.protoDuration(Duration.ofMillis(2500))).build());
    try (ClaimdClient c = ClaimdClient.builder(server.target()).interceptor(rw).logger(Quiet.LOGGER).build()) {
      boolean[] ran = new boolean[1];
      GuardResult r = c.guard(request(null), ctx -> ran[0] = true);
      assertFalse(ran[0] || r.ran());
      assertEquals(409, r.status());
      assertEquals(3, r.retryAfter().getAsLong(), "retry_after rounded up");
      assertEquals(Disposition.DEFERRED, r.disposition());
      assertArrayEquals(utf8(Guard.DEFERRED_BODY), r.body());
    }
  }

  @Test
  void supersededIsAcknowledgedAndRunsNothing() {
    Rewrite rw = new Rewrite(r -> ClaimResponse.newBuilder().setOutcome(Outcome.OUTCOME_SUPERSEDED).setKey(r.getKey()).build());
    try (ClaimdClient c = ClaimdClient.builder(server.target()).interceptor(rw).logger(Quiet.LOGGER).build()) {
      boolean[] ran = new boolean[1];
      GuardResult r = c.guard(request(null), ctx -> ran[0] = true);
      assertFalse(ran[0] || r.ran());
      assertEquals(200, r.status());
      assertFalse(r.retryAfter().isPresent());
      assertEquals(Disposition.SUPERSEDED, r.disposition());
      assertArrayEquals(utf8("event superseded by a later state of its entity\n"), r.body());
    }
  }

  @Test
  void anOutcomeThisGuardDoesNotKnowIsA500() {
    Rewrite rw = new Rewrite(r -> r.toBuilder().setOutcomeValue(99).build());
    try (ClaimdClient c = ClaimdClient.builder(server.target()).interceptor(rw).logger(Quiet.LOGGER).build()) {
      GuardResult r = c.guard(request(null), ctx -> "no");
      assertFalse(r.ran());
      assertEquals(500, r.status());
      assertArrayEquals(utf8("unexpected answer from claimd\n"), r.body());
    }
  }

  @Test
  void theHandlerSeesHowTheKeyWasAcquired() {
    GuardResult r = plain.guard(request(null), ctx -> {
      assertEquals(Reason.REASON_NEW, ctx.claim().reason());
      assertEquals(ctx.claim().fencingToken(), ctx.lease().fencingToken());
      return Map.of("ok", true);
    });
    assertEquals(200, r.status());
    assertEquals("{\"ok\":true}", new String(r.body(), StandardCharsets.UTF_8));
  }

  // --- the effect fence, where the guardspec cannot say it ------------------------------

  /** sqlite is a fresh SQLite file with a ledger table; these cases need no PostgreSQL. */
  static java.sql.Connection sqlite() throws Exception {
    java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("claimd-java-guard-effect-");
    java.sql.Connection c = dev.claimd.client.testing.TestDatabases.open("sqlite:" + dir.resolve("guard.db"));
    try (java.sql.Statement st = c.createStatement()) {
      st.execute("CREATE TABLE ledger (key TEXT NOT NULL)");
    }
    return c;
  }

  static int rows(java.sql.Connection c, String table) throws Exception {
    try (java.sql.Statement st = c.createStatement(); java.sql.ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
      rs.next();
      return rs.getInt(1);
    }
  }

  @Test
  void aSecondEffectInOneDeliveryIsAnErrorAndTheFirstStands() throws Exception {
    try (java.sql.Connection db = sqlite()) {
      GuardResult r = plain.guard(request(null), ctx -> {
        Effect fx = ctx.effect(db, e -> e.setResult("first"));
        assertThrows(IllegalStateException.class, () -> ctx.effect(db, e -> e.setResult("second")));
        return fx.result();
      });
      assertEquals(200, r.status(), () -> "error " + r.error());
      assertArrayEquals(utf8("first"), r.body());
      assertEquals(1, rows(db, "claimd_effects"));
    }
  }

  @Test
  void anEffectAfterTheHandlerReturnedIsAnError() throws Exception {
    try (java.sql.Connection db = sqlite()) {
      Guard.GuardContext[] kept = new Guard.GuardContext[1];
      GuardResult r = plain.guard(request(null), ctx -> {
        kept[0] = ctx;
        return "done";
      });
      assertEquals(200, r.status());
      assertThrows(IllegalStateException.class, () -> kept[0].effect(db, e -> e.setResult("late")));
      assertEquals(0, rows(db, "ledger"));
    }
  }

  @Test
  void aPermanentFailureInsideTheEffectFailsTheEventAndWritesNothing() throws Exception {
    try (java.sql.Connection db = sqlite()) {
      ClaimRequest req = request(null);
      GuardResult r = plain.guard(req, ctx -> ctx.effect(db, e -> {
        try (java.sql.Statement st = db.createStatement()) {
          st.executeUpdate("INSERT INTO ledger (key) VALUES ('x')");
        }
        throw new PermanentException("card_declined");
      }).result());
      assertEquals(200, r.status());
      assertEquals(Disposition.FAILED, r.disposition());
      assertArrayEquals(utf8("card_declined"), r.body());
      assertEquals(0, rows(db, "ledger"), "the effect's writes rolled back");
      assertEquals(0, rows(db, "claimd_effects"), "the fence rolled back");
      assertEquals(EventState.EVENT_STATE_FAILED, plain.get(NS, "stripe", req.getEventId()).getState());
    }
  }

  @Test
  void theContextsEffectKeyIsTheClaimsEffectKey() {
    ClaimRequest req = request(null);
    String[] keys = new String[2];
    plain.guard(req, ctx -> {
      keys[0] = ctx.effectKey("charge");
      keys[1] = ctx.effectKey("refund");
      assertEquals(Effects.effectKey(NS, "stripe", ctx.lease().key(), "charge"), keys[0]);
      return null;
    });
    assertTrue(keys[0].startsWith("claimd-") && keys[0].length() == 39, keys[0]);
    assertFalse(keys[0].equals(keys[1]), "steps differ");
  }

  /** recovered reads claimd_effects_recovered_total{provider="stripe"} from claimd's /metrics (0 before the first). */
  static double recovered() throws Exception {
    java.net.http.HttpResponse<String> r = java.net.http.HttpClient.newHttpClient().send(
        java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://" + server.http() + "/metrics")).build(),
        java.net.http.HttpResponse.BodyHandlers.ofString());
    assertEquals(200, r.statusCode());
    for (String line : r.body().split("\n")) {
      if (line.startsWith("claimd_effects_recovered_total{") && line.contains("provider=\"stripe\"")) {
        return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    return 0;
  }

  @Test
  void theTypedTransitionCanSayTheResultWasRecovered() throws Exception {
    double before = recovered();
    ClaimRequest req = request(null);
    Claim c = plain.claim(req);
    plain.start(c.lease());
    plain.transition(c.lease(), EventState.EVENT_STATE_SETTLED, utf8("from the fence"), true);
    Record rec = plain.get(NS, "stripe", req.getEventId());
    assertEquals(EventState.EVENT_STATE_SETTLED, rec.getState());
    assertArrayEquals(utf8("from the fence"), rec.getResult().toByteArray());
    assertEquals(before + 1, recovered(), "claimd counted the recovered effect");
  }
}
