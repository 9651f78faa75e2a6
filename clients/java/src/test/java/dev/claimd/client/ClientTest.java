package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.Descriptors.MethodDescriptor;
import com.google.protobuf.Descriptors.ServiceDescriptor;
import com.google.protobuf.Message;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimProto;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.EntityProto;
import dev.claimd.idempotency.v1.ErrorReason;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.ProviderProto;
import dev.claimd.idempotency.v1.Reason;
import dev.claimd.idempotency.v1.Record;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall.SimpleForwardingClientCall;
import io.grpc.ForwardingClientCallListener.SimpleForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The typed calls, their retries and their errors, against a real claimd. */
class ClientTest {
  static final String NS = "java-client-test";
  static TestClaimd server;
  static ClaimdClient plain;

  @BeforeAll
  static void start() throws Exception {
    server = TestClaimd.start();
    plain = ClaimdClient.builder(server.target()).build();
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

  static String eventId() {
    return "evt_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8));
  }

  static ClaimRequest request(String evt) {
    return ClaimRequest.newBuilder().setNamespace(NS).setProvider("stripe").setEventId(evt).build();
  }

  static ClaimRequest request(String evt, Duration lease) {
    return request(evt).toBuilder().setLease(ClaimdClient.protoDuration(lease)).build();
  }

  /** Sleeps records the pauses between retries instead of taking them. */
  static final class Sleeps implements ClaimdClient.Sleeper {
    final List<Duration> pauses = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void sleep(Duration d) {
      pauses.add(d);
    }
  }

  /**
   * Tamper sees every Claim attempt's request and may replace its answer with an
   * error: before sending it (Function returns a status for attempt n) or after
   * claimd answered (lose=true: the answer is lost on the way back).
   */
  static final class Tamper implements ClientInterceptor {
    final List<ClaimRequest> sent = Collections.synchronizedList(new ArrayList<>());
    final AtomicInteger attempts = new AtomicInteger();
    final Function<Integer, StatusRuntimeException> fault;
    final boolean lose;

    Tamper(Function<Integer, StatusRuntimeException> fault, boolean lose) {
      this.fault = fault;
      this.lose = lose;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(io.grpc.MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
      if (!m.equals(ClaimdMethods.CLAIM) && !m.getFullMethodName().equals(ClaimdMethods.CLAIM.getFullMethodName())) {
        return next.newCall(m, o);
      }
      int n = attempts.incrementAndGet();
      StatusRuntimeException e = fault.apply(n);
      return new SimpleForwardingClientCall<>(next.newCall(m, o)) {
        @Override
        public void start(Listener<R> l, Metadata h) {
          Listener<R> wrapped = e == null ? l : new SimpleForwardingClientCallListener<>(l) {
            @Override
            public void onMessage(R message) {
              // the answer is lost
            }

            @Override
            public void onClose(Status status, Metadata trailers) {
              super.onClose(e.getStatus(), e.getTrailers() == null ? new Metadata() : e.getTrailers());
            }
          };
          if (e != null && !lose) {
            l.onClose(e.getStatus(), e.getTrailers() == null ? new Metadata() : e.getTrailers());
            return;
          }
          super.start(wrapped, h);
        }

        @Override
        public void request(int k) {
          if (e == null || lose) {
            super.request(k);
          }
        }

        @Override
        public void sendMessage(Q message) {
          sent.add((ClaimRequest) message);
          if (e == null || lose) {
            super.sendMessage(message);
          }
        }

        @Override
        public void halfClose() {
          if (e == null || lose) {
            super.halfClose();
          }
        }
      };
    }
  }

  static StatusRuntimeException error(Status.Code code, String reason, Duration retryDelay) {
    com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("injected");
    if (reason != null) {
      st.addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("claimd.dev").setReason(reason).build()));
    }
    if (retryDelay != null) {
      st.addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(ClaimdClient.protoDuration(retryDelay)).build()));
    }
    return StatusProto.toStatusRuntimeException(st.build());
  }

  ClaimdClient tampered(Tamper t, Sleeps s) {
    return ClaimdClient.builder(server.target()).interceptor(t).clock(java.time.Clock.systemUTC()).sleeper(s).build();
  }

  @Test
  void aClaimWhoseAnswerWasLostIsRetriedWithTheSameAttemptIdAndGetsTheSameLease() {
    Tamper t = new Tamper(n -> n == 1 ? error(Status.Code.UNAVAILABLE, null, null) : null, true);
    Sleeps s = new Sleeps();
    try (ClaimdClient c = tampered(t, s)) {
      String evt = eventId();
      Claim cl = c.claim(request(evt));
      assertTrue(cl.acquired(), cl.toString());
      assertEquals(Reason.REASON_NEW, cl.reason(), "the retry is the same claim, not a second one");
      assertEquals(2, t.sent.size());
      String id = t.sent.get(0).getAttemptId();
      assertTrue(id.matches("[0-9a-f]{32}"), "attempt_id " + id + ": want 16 random bytes in hex");
      assertEquals(id, t.sent.get(1).getAttemptId(), "the retry's attempt_id");
      assertEquals(1, s.pauses.size());
      // The lost answer's lease works: the retry got the same token and secret.
      assertEquals(1, cl.fencingToken());
      c.start(cl.lease());
      c.settle(cl.lease(), "ok".getBytes(StandardCharsets.UTF_8));
      assertEquals(EventState.EVENT_STATE_SETTLED, plain.get(NS, "stripe", evt).getState());
    }
  }

  @Test
  void everyClaimCallDrawsItsOwnAttemptId() {
    Tamper t = new Tamper(n -> null, false);
    try (ClaimdClient c = tampered(t, new Sleeps())) {
      c.claim(request(eventId()));
      c.claim(request(eventId()));
      assertNotEquals(t.sent.get(0).getAttemptId(), t.sent.get(1).getAttemptId());
    }
  }

  @Test
  void unavailableIsRetriedFourTimesWithFullJitterBackoff() {
    Tamper t = new Tamper(n -> error(Status.Code.UNAVAILABLE, null, null), false);
    Sleeps s = new Sleeps();
    try (ClaimdClient c = tampered(t, s)) {
      ClaimdException e = assertThrows(ClaimdException.Unavailable.class, () -> c.claim(request(eventId())));
      assertEquals(4, e.attempts());
      assertEquals(4, t.sent.size());
      assertEquals(1, t.sent.stream().map(ClaimRequest::getAttemptId).distinct().count(), "one attempt_id for all");
      assertEquals(3, s.pauses.size());
      for (int i = 0; i < 3; i++) {
        Duration ceiling = RetryPolicy.DEFAULT.backoffCeiling(i + 1);
        assertTrue(!s.pauses.get(i).isNegative() && s.pauses.get(i).compareTo(ceiling) <= 0,
            "pause " + (i + 1) + " = " + s.pauses.get(i) + ", want within [0, " + ceiling + "]");
      }
    }
  }

  @Test
  void aRateLimitIsRetriedAfterItsDelayAndOneBeyondTheTotalFailsAtOnce() {
    Tamper t = new Tamper(n -> n == 1 ? error(Status.Code.RESOURCE_EXHAUSTED, "RATE_LIMITED", Duration.ofMillis(1500)) : null, false);
    Sleeps s = new Sleeps();
    try (ClaimdClient c = tampered(t, s)) {
      assertTrue(c.claim(request(eventId())).acquired());
      assertEquals(List.of(Duration.ofMillis(1500)), s.pauses, "the pause is at least RetryInfo's delay");
    }
    Tamper far = new Tamper(n -> error(Status.Code.RESOURCE_EXHAUSTED, "RATE_LIMITED", Duration.ofMillis(29_500)), false);
    Sleeps s2 = new Sleeps();
    try (ClaimdClient c = tampered(far, s2)) {
      ClaimdException e = assertThrows(ClaimdException.RateLimited.class, () -> c.claim(request(eventId())));
      assertEquals(1, e.attempts(), "a pause past the total is not taken");
      assertEquals(Duration.ofMillis(29_500), e.retryDelay());
      assertEquals(ErrorReason.RATE_LIMITED, e.reason());
      assertEquals(List.of(), s2.pauses);
    }
  }

  @Test
  void refusalsAreNotRetried() {
    for (StatusRuntimeException err : List.of(
        error(Status.Code.RESOURCE_EXHAUSTED, null, null),
        error(Status.Code.PERMISSION_DENIED, "NAMESPACE_DENIED", null),
        error(Status.Code.UNAUTHENTICATED, "TOKEN_UNKNOWN", null),
        error(Status.Code.INTERNAL, "INTERNAL", null))) {
      Tamper t = new Tamper(n -> err, false);
      try (ClaimdClient c = tampered(t, new Sleeps())) {
        ClaimdException e = assertThrows(ClaimdException.class, () -> c.claim(request(eventId())));
        assertEquals(1, e.attempts(), err.getStatus().getCode() + " was retried");
      }
    }
  }

  @Test
  void errorsAreTypedByReasonThenByCode() {
    record Case(Status.Code code, String reason, Class<? extends ClaimdException> want, ErrorReason wantReason) {}
    for (Case tc : List.of(
        // STALE_TOKEN is decided by its reason, whichever code carries it.
        new Case(Status.Code.ABORTED, "STALE_TOKEN", ClaimdException.StaleToken.class, ErrorReason.STALE_TOKEN),
        new Case(Status.Code.FAILED_PRECONDITION, "STALE_TOKEN", ClaimdException.StaleToken.class, ErrorReason.STALE_TOKEN),
        new Case(Status.Code.FAILED_PRECONDITION, "INVALID_TRANSITION", ClaimdException.InvalidTransition.class, ErrorReason.INVALID_TRANSITION),
        new Case(Status.Code.FAILED_PRECONDITION, "RESULT_MISMATCH", ClaimdException.ResultMismatch.class, ErrorReason.RESULT_MISMATCH),
        new Case(Status.Code.PERMISSION_DENIED, "NOT_OWNER", ClaimdException.NotOwner.class, ErrorReason.NOT_OWNER),
        new Case(Status.Code.PERMISSION_DENIED, "ROLE_DENIED", ClaimdException.PermissionDenied.class, ErrorReason.ROLE_DENIED),
        new Case(Status.Code.NOT_FOUND, "PROVIDER_NOT_FOUND", ClaimdException.ProviderNotFound.class, ErrorReason.PROVIDER_NOT_FOUND),
        new Case(Status.Code.NOT_FOUND, "RECORD_NOT_FOUND", ClaimdException.NotFound.class, ErrorReason.RECORD_NOT_FOUND),
        new Case(Status.Code.UNAUTHENTICATED, "CREDENTIALS_MISSING", ClaimdException.Unauthenticated.class, ErrorReason.CREDENTIALS_MISSING),
        new Case(Status.Code.DEADLINE_EXCEEDED, null, ClaimdException.Unavailable.class, ErrorReason.ERROR_REASON_UNSPECIFIED),
        new Case(Status.Code.INTERNAL, "SOMETHING_NEW", ClaimdException.class, ErrorReason.UNRECOGNIZED))) {
      ClaimdException e = ClaimdException.from("Transition", error(tc.code, tc.reason, null), 1);
      assertEquals(tc.want, e.getClass(), tc.toString());
      assertEquals(tc.wantReason, e.reason(), tc.toString());
      assertEquals(tc.code, e.code());
    }
    // An ErrorInfo of another domain is not claimd's reason.
    com.google.rpc.Status other = com.google.rpc.Status.newBuilder().setCode(Status.Code.ABORTED.value())
        .addDetails(Any.pack(ErrorInfo.newBuilder().setDomain("example.com").setReason("STALE_TOKEN").build())).build();
    assertEquals(ClaimdException.class, ClaimdException.from("Renew", StatusProto.toStatusRuntimeException(other), 1).getClass());
  }

  @Test
  void claimdsOwnErrorsArriveTyped() {
    String evt = eventId();
    Claim first = plain.claim(request(evt, Duration.ofMillis(300)));
    Lease old = first.lease();
    // Another holder takes over once the short lease ends (wait answers then).
    Claim second = plain.claim(request(evt).toBuilder().setHolder("other")
        .setWait(ClaimdClient.protoDuration(Duration.ofSeconds(10))).build());
    assertTrue(second.acquired(), second.toString());
    assertEquals(Reason.REASON_LEASE_EXPIRED, second.reason());
    assertInstanceOf(ClaimdException.StaleToken.class, assertThrows(ClaimdException.class, () -> plain.start(old)));
    assertInstanceOf(ClaimdException.StaleToken.class, assertThrows(ClaimdException.class, () -> plain.renew(old, null)));
    assertInstanceOf(ClaimdException.StaleToken.class, assertThrows(ClaimdException.class, () -> plain.release(old)));

    Lease wrongSecret = new Lease(NS, "stripe", second.key(), second.fencingToken(),
        com.google.protobuf.ByteString.copyFrom(new byte[16]));
    ClaimdException notOwner = assertThrows(ClaimdException.class, () -> plain.start(wrongSecret));
    assertInstanceOf(ClaimdException.NotOwner.class, notOwner);
    assertInstanceOf(ClaimdException.PermissionDenied.class, notOwner);

    Lease lease = second.lease();
    plain.start(lease);
    plain.settle(lease, "one".getBytes(StandardCharsets.UTF_8));
    plain.settle(lease, "one".getBytes(StandardCharsets.UTF_8)); // a repeat changes nothing
    assertInstanceOf(ClaimdException.ResultMismatch.class,
        assertThrows(ClaimdException.class, () -> plain.settle(lease, "two".getBytes(StandardCharsets.UTF_8))));
    ClaimdException invalid = assertThrows(ClaimdException.class, () -> plain.release(lease));
    assertInstanceOf(ClaimdException.InvalidTransition.class, invalid);
    assertEquals("EVENT_STATE_SETTLED", invalid.metadata().get("current_state"));

    assertInstanceOf(ClaimdException.NotFound.class,
        assertThrows(ClaimdException.class, () -> plain.get(NS, "stripe", eventId())));
    assertInstanceOf(ClaimdException.ProviderNotFound.class, assertThrows(ClaimdException.class,
        () -> plain.claim(request(eventId()).toBuilder().setProvider("nosuchprovider").build())));
    ClaimdException bad = assertThrows(ClaimdException.class,
        () -> plain.claim(request(eventId()).toBuilder().setNamespace("Not A Namespace").build()));
    assertInstanceOf(ClaimdException.InvalidArgument.class, bad);
    assertEquals(1, bad.attempts());
  }

  @Test
  void renewExtendsTheLeaseAndGetShowsNoSecret() {
    Claim c = plain.claim(request(eventId(), Duration.ofSeconds(2)));
    Record before = plain.get(NS, "stripe", c.key());
    Record after = plain.renew(c.lease(), Duration.ofSeconds(30));
    assertTrue(after.getLeaseExpiresAt().getSeconds() > before.getLeaseExpiresAt().getSeconds() + 20);
    assertFalse(c.lease().toString().contains(HexFormat.of().formatHex(c.response().getLeaseSecret().toByteArray())));
    assertEquals(16, c.response().getLeaseSecret().size());
    Record released = plain.release(c.lease());
    assertTrue(released.getReleased());
  }

  @Test
  void providersAreListed() {
    assertTrue(plain.listProviders().stream().anyMatch(p -> p.getName().equals("stripe")));
    assertEquals("stripe", plain.getProvider("stripe").getName());
  }

  @Test
  void anUnreachableClaimdIsUnavailableAfterTheRetries() throws Exception {
    String target;
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      target = "127.0.0.1:" + s.getLocalPort();
    }
    Sleeps s = new Sleeps();
    try (ClaimdClient c = ClaimdClient.builder(target).sleeper(s).build()) {
      ClaimdException e = assertThrows(ClaimdException.Unavailable.class, () -> c.claim(request(eventId())));
      assertEquals(4, e.attempts());
    }
  }

  @Test
  void theDeclaredMethodsAreTheProtosServices() {
    Map<String, io.grpc.MethodDescriptor<?, ?>> declared = new HashMap<>();
    for (io.grpc.MethodDescriptor<?, ?> m : ClaimdMethods.ALL) {
      declared.put(m.getFullMethodName(), m);
    }
    int n = 0;
    for (var file : List.of(ClaimProto.getDescriptor(), ProviderProto.getDescriptor(), EntityProto.getDescriptor())) {
      for (ServiceDescriptor svc : file.getServices()) {
        for (MethodDescriptor md : svc.getMethods()) {
          n++;
          String name = svc.getFullName() + "/" + md.getName();
          io.grpc.MethodDescriptor<?, ?> m = declared.get(name);
          assertTrue(m != null, name + " is not declared in ClaimdMethods");
          assertEquals(io.grpc.MethodDescriptor.MethodType.UNARY, m.getType(), name);
          assertFalse(md.isClientStreaming() || md.isServerStreaming(), name);
          Message req = (Message) ((io.grpc.MethodDescriptor.PrototypeMarshaller<?>) (Object) m.getRequestMarshaller()).getMessagePrototype();
          Message resp = (Message) ((io.grpc.MethodDescriptor.PrototypeMarshaller<?>) (Object) m.getResponseMarshaller()).getMessagePrototype();
          assertEquals(md.getInputType().getFullName(), req.getDescriptorForType().getFullName(), name + " request");
          assertEquals(md.getOutputType().getFullName(), resp.getDescriptorForType().getFullName(), name + " response");
        }
      }
    }
    assertEquals(n, declared.size(), "ClaimdMethods declares a method no service has");
  }

  @Test
  void plaintextGoesOnlyToLoopbackAndATokenNeverInPlaintextOffIt() {
    for (String t : List.of("127.0.0.1:1", "localhost:1", "[::1]:1", "dns:///localhost:1", "127.0.0.2:50051")) {
      assertTrue(ClaimdClient.isLoopback(t), t);
      ClaimdClient.builder(t).token("cl_secret").build().close();
    }
    for (String t : List.of("claimd.invalid:50051", "192.0.2.1:50051", "dns:///claimd.internal:50051")) {
      assertFalse(ClaimdClient.isLoopback(t), t);
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClaimdClient.builder(t).build());
      assertTrue(e.getMessage().contains("not a loopback address"), e.getMessage());
      IllegalArgumentException tok = assertThrows(IllegalArgumentException.class,
          () -> ClaimdClient.builder(t).insecure().token("cl_secret-all-the-same").build());
      assertTrue(tok.getMessage().contains("plaintext"), tok.getMessage());
      assertFalse(tok.getMessage().contains("secret-all-the-same"));
      ClaimdClient.builder(t).insecure().build().close();
    }
    for (String bad : List.of("cl_secret-all-the-same\n", " cl_secret-all-the-same", "", "cl_a\tb")) {
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ClaimdClient.builder("127.0.0.1:1").token(bad));
      assertFalse(e.getMessage().contains("secret-all-the-same"), "the message quotes the token");
    }
  }

  @Test
  void aClaimAnswerAlwaysHasAnOutcome() {
    assertArrayEquals(new byte[0], new Claim(NS, "stripe", ClaimResponse.getDefaultInstance(), null, java.time.Instant.now()).result());
  }
}
