package dev.claimd.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import com.google.protobuf.ByteString;
import dev.claimd.client.Claim;
import dev.claimd.client.ClaimdClient;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.Delivery;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Reason;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.sql.Connection;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The example end to end: HTTP POSTs to the receiver, a real claimd, the ledger. */
class ReceiverTest {
  static TestClaimd server;
  static ClaimdClient claimd;
  static Receiver.Ledger ledger;
  static HttpServer receiver;
  static URI url;
  // Held here: java.util.logging keeps loggers only weakly, with their levels.
  static final java.util.logging.Logger[] QUIET = {
    java.util.logging.Logger.getLogger("receiver"), java.util.logging.Logger.getLogger("dev.claimd.client")
  };
  static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

  @BeforeAll
  static void start() throws Exception {
    // The receiver logs every delivery; the assertions say what matters here.
    for (java.util.logging.Logger l : QUIET) {
      l.setLevel(java.util.logging.Level.OFF);
    }
    ledger = Receiver.Ledger.open(Files.createTempDirectory("claimd-java-example-").resolve("ledger.db"));
    server = TestClaimd.start();
    claimd = ClaimdClient.builder(server.target()).build();
    receiver = Receiver.start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), claimd, ledger, "java-example");
    url = URI.create("http://127.0.0.1:" + receiver.getAddress().getPort() + "/webhooks/stripe");
  }

  @AfterAll
  static void stop() throws Exception {
    if (receiver != null) {
      receiver.stop(0);
    }
    if (claimd != null) {
      claimd.close();
    }
    if (server != null) {
      int code = server.stop();
      assertEquals(0, code, () -> "claimd's exit code; its last lines:\n" + String.join("\n", server.logs()));
    }
  }

  static String eventId() {
    return "evt_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8));
  }

  static String stripeEvent(String id, Long amount) {
    // One payment intent per event: claimd orders a payment intent's events
    // (Stripe's lifecycle), and a second succeeded of one intent would be
    // superseded.
    String obj = "{\"id\":\"pi_" + id + "\",\"object\":\"payment_intent\"" + (amount == null ? "" : ",\"amount\":" + amount) + "}";
    return "{\"id\":\"" + id + "\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":" + obj + "}}";
  }

  static HttpResponse<String> post(URI to, String body, String signature) throws Exception {
    HttpRequest req = HttpRequest.newBuilder(to).timeout(Duration.ofSeconds(20))
        .header("Content-Type", "application/json").header("Stripe-Signature", signature)
        .POST(HttpRequest.BodyPublishers.ofString(body)).build();
    return HTTP.send(req, HttpResponse.BodyHandlers.ofString());
  }

  @Test
  void theSameEventThreeTimesWritesOneRow() throws Exception {
    String evt = eventId();
    String body = stripeEvent(evt, 1999L);
    // Stripe signs each attempt anew (t= changes); the key is the event id.
    HttpResponse<String> first = post(url, body, "t=1700000000,v1=aaa");
    assertEquals(200, first.statusCode(), first.body());
    assertTrue(first.body().matches("\\{\"ledger_row\":\\d+}"), first.body());
    for (String sig : new String[] {"t=1700000060,v1=bbb", "t=1700000120,v1=ccc"}) {
      HttpResponse<String> again = post(url, body, sig);
      assertEquals(200, again.statusCode());
      assertEquals(first.body(), again.body(), "a duplicate gets the stored answer");
    }
    assertEquals(1, ledger.rows(evt));
  }

  @Test
  void aPermanentlyBadEventIsAnswered200AndNeverWritten() throws Exception {
    String evt = eventId();
    HttpResponse<String> r = post(url, stripeEvent(evt, null), "t=1,v1=a");
    assertEquals(200, r.statusCode());
    assertTrue(r.body().contains("no integer data.object.amount"), r.body());
    HttpResponse<String> again = post(url, stripeEvent(evt, null), "t=2,v1=b");
    assertEquals(r.body(), again.body());
    assertEquals(0, ledger.rows(evt));
  }

  @Test
  void theSameIdWithAnotherBodyIs422() throws Exception {
    String evt = eventId();
    assertEquals(200, post(url, stripeEvent(evt, 1L), "t=1,v1=a").statusCode());
    assertEquals(422, post(url, stripeEvent(evt, 2L), "t=2,v1=b").statusCode());
    assertEquals(1, ledger.rows(evt));
  }

  @Test
  void notAStripeEventIs400() throws Exception {
    assertEquals(400, post(url, "not json", "t=1,v1=a").statusCode());
  }

  @Test
  void claimdUnreachableIs503WithRetryAfterAndWritesNothing() throws Exception {
    String closed;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      closed = "127.0.0.1:" + s.getLocalPort();
    }
    Receiver.Ledger own = Receiver.Ledger.open(Files.createTempDirectory("claimd-java-example-").resolve("down.db"));
    try (ClaimdClient down = ClaimdClient.builder(closed).build()) {
      HttpServer r = Receiver.start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), down, own, "java-example");
      try {
        String evt = eventId();
        HttpResponse<String> resp = post(URI.create("http://127.0.0.1:" + r.getAddress().getPort() + "/webhooks/stripe"),
            stripeEvent(evt, 5L), "t=1,v1=a");
        assertEquals(503, resp.statusCode());
        assertEquals("5", resp.headers().firstValue("Retry-After").orElse(""));
        assertEquals(0, own.rows(evt));
      } finally {
        r.stop(0);
      }
    }
  }

  /** Crash stands for the receiver dying: an Error leaves the key to its lease (GUARD.md row 20). */
  static final class Crash extends Error {
    private static final long serialVersionUID = 1L;

    Crash() {
      super("the receiver died after its commit, before its settle");
    }
  }

  @Test
  void aReceiverThatDiedAfterItsCommitIsNotRepeated() throws Exception {
    String evt = eventId();
    String body = stripeEvent(evt, 700L);
    ClaimRequest.Builder req = ClaimRequest.newBuilder().setNamespace("java-example").setProvider("stripe")
        .setDelivery(Delivery.newBuilder().setBody(ByteString.copyFromUtf8(body)).putHeaders("Stripe-Signature", "t=1,v1=a"));
    // The first holder books the row through its effect, as the receiver
    // does, and dies before settling: the row and the fence are committed.
    long[] row = new long[1];
    ClaimRequest first = req.clone().setLease(ClaimdClient.protoDuration(Duration.ofMillis(300))).build();
    assertThrows(Crash.class, () -> claimd.guard(first, ctx -> {
      try (Connection db = ledger.connect()) {
        ctx.effect(db, e -> {
          row[0] = Receiver.Ledger.append(db, new Receiver.Ledger.Booking(evt, "payment_intent.succeeded", "pi_" + evt, "", 0));
          e.setResult(Map.of("ledger_row", row[0]));
        });
      }
      throw new Crash();
    }));
    assertEquals(1, ledger.rows(evt));
    // Its lease ends (a waiting claim is answered then, no sleep); the key is given back.
    Claim waiter = claimd.claim(req.clone().setWait(ClaimdClient.protoDuration(Duration.ofSeconds(10))).setHolder("waiter").build());
    assertEquals(Reason.REASON_LEASE_EXPIRED, waiter.reason(), "the waiter took the key over at the lease's end");
    claimd.release(waiter.lease());

    // Stripe retries: the receiver's effect finds the fence and writes nothing.
    HttpResponse<String> retry = post(url, body, "t=2,v1=b");
    assertEquals(200, retry.statusCode(), retry.body());
    assertEquals("{\"ledger_row\":" + row[0] + "}", retry.body(), "the answer stored with the fence");
    assertEquals(1, ledger.rows(evt), "the row is written once");
    assertEquals(EventState.EVENT_STATE_SETTLED, claimd.get("java-example", "stripe", waiter.key()).getState());
  }
}
