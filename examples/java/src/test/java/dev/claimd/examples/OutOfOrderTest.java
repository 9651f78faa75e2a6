package dev.claimd.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.sun.net.httpserver.HttpServer;
import dev.claimd.client.ClaimdClient;
import dev.claimd.client.testing.TestClaimd;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * A Stripe payment delivered out of order, end to end: internal/horizon's
 * out_of_order fixture (the refund first, then the capture, stale processing
 * and pending events, the refund again) POSTed to the receiver in the order its
 * sequence.yaml lists, against a real claimd with the built-in Stripe
 * lifecycles. The receiver has no ordering logic of its own.
 */
class OutOfOrderTest {
  /**
   * FIXTURE is the example's copy of the fixture, so that the example builds
   * and passes anywhere, outside the repository too; ORIGINAL is where the
   * repository keeps it, which sameAsTheRepositorysFixture holds it to.
   */
  static final Path FIXTURE = Path.of("src", "test", "resources", "out_of_order");
  static final Path ORIGINAL = Path.of("..", "..", "internal", "horizon", "testdata", "lifecycles", "stripe", "out_of_order");
  static final String CHARGE = "ch_3QxOrd2eZvKYlo2C1Rk5Zt9B";
  static final String INTENT = "pi_3QxOrd2eZvKYlo2C1Nq0Pq7A";

  record Step(String file, String order) {}

  /**
   * deliveries are sequence.yaml's (file, order) pairs, in order. The file is
   * read for these two keys only (the JDK has no YAML parser): each entry starts
   * with "- file:" and names its "order:" below.
   */
  static List<Step> deliveries() throws Exception {
    String text = Files.readString(FIXTURE.resolve("sequence.yaml"));
    String block = text.split("\ndeliveries:\n", 2)[1].split("\nfinal:", 2)[0] + "\n";
    Matcher m = Pattern.compile("- file: (\\S+)\n(?:    .*\n)*?    order: (\\w+)").matcher(block);
    List<Step> steps = new ArrayList<>();
    while (m.find()) {
      steps.add(new Step(m.group(1), m.group(2)));
    }
    int entries = block.split("- file:", -1).length - 1;
    assertTrue(!steps.isEmpty() && steps.size() == entries, "sequence.yaml: read " + steps);
    return steps;
  }

  /**
   * In a checkout (as make test runs it), the copy is the repository's
   * fixture, file for file. A copy of the example outside the repository has
   * no original to compare with: JUnit reports this test skipped there.
   */
  @Test
  void sameAsTheRepositorysFixture() throws Exception {
    assumeTrue(Files.isDirectory(ORIGINAL), "not in a claimd checkout: no " + ORIGINAL + " to compare with");
    List<String> want, got;
    try (Stream<Path> o = Files.list(ORIGINAL); Stream<Path> c = Files.list(FIXTURE)) {
      want = o.map(p -> p.getFileName().toString()).sorted().toList();
      got = c.map(p -> p.getFileName().toString()).sorted().toList();
    }
    assertEquals(want, got, FIXTURE + " lists other files than " + ORIGINAL + ": copy them again");
    for (String f : want) {
      assertEquals(Files.readString(ORIGINAL.resolve(f)), Files.readString(FIXTURE.resolve(f)),
          FIXTURE.resolve(f) + " differs from " + ORIGINAL.resolve(f) + ": copy it again");
    }
  }

  @Test
  void aStripeSequenceOutOfOrderEndsWithTheLedgerCorrect() throws Exception {
    for (java.util.logging.Logger l : ReceiverTest.QUIET) {
      l.setLevel(java.util.logging.Level.OFF);
    }
    List<Step> seq = deliveries();
    Receiver.Ledger ledger = Receiver.Ledger.open(Files.createTempDirectory("claimd-java-out-of-order-").resolve("ledger.db"));
    try (TestClaimd server = TestClaimd.start(); ClaimdClient claimd = ClaimdClient.builder(server.target()).build()) {
      HttpServer receiver = Receiver.start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), claimd, ledger, "java-out-of-order");
      try {
        URI url = URI.create("http://127.0.0.1:" + receiver.getAddress().getPort() + "/webhooks/stripe");
        for (int i = 0; i < seq.size(); i++) {
          Step s = seq.get(i);
          HttpResponse<String> r = ReceiverTest.post(url, Files.readString(FIXTURE.resolve(s.file())), "t=" + i + ",v1=a");
          String what = "delivery " + (i + 1) + " (" + s + "): " + r.statusCode() + " " + r.body();
          switch (s.order()) {
            case "defer" -> {
              // Stripe retries a 409; its retry is the replay.
              assertEquals(409, r.statusCode(), what);
              assertTrue(Long.parseLong(r.headers().firstValue("Retry-After").orElse("0")) >= 1, what);
            }
            case "proceed" -> {
              assertEquals(200, r.statusCode(), what);
              assertTrue(r.body().contains("ledger_row"), what);
            }
            case "supersede" -> {
              assertEquals(200, r.statusCode(), what);
              assertEquals("event superseded by a later state of its entity\n", r.body(), what);
            }
            default -> throw new AssertionError("sequence.yaml: unknown order " + s.order());
          }
        }
        // Stripe may deliver any of them again, in any order: nothing changes.
        for (int i = seq.size() - 1; i >= 0; i--) {
          HttpResponse<String> r = ReceiverTest.post(url, Files.readString(FIXTURE.resolve(seq.get(i).file())), "t=" + (100 + i) + ",v1=b");
          assertEquals(200, r.statusCode(), "redelivery of " + seq.get(i).file() + ": " + r.body());
        }
      } finally {
        receiver.stop(0);
      }
      int code = server.stop();
      assertEquals(0, code, () -> "claimd's exit code; its last lines:\n" + String.join("\n", server.logs()));
    }
    assertEquals(List.of(
        new Receiver.Ledger.Booking("evt_3QxOrd2eZvKYlo2C0cHs0k03", "charge.succeeded", CHARGE, "A-1001", 2000),
        new Receiver.Ledger.Booking("evt_3QxOrd2eZvKYlo2C0aPs0k04", "payment_intent.succeeded", INTENT, "A-1001", 0),
        new Receiver.Ledger.Booking("evt_3QxOrd2eZvKYlo2C0cHr3f05", "charge.refunded", CHARGE, "A-1001", -2000)),
        ledger.bookings());
    assertEquals(0, ledger.balance("A-1001")); // sequence.yaml's ledger
    assertFalse(ledger.bookings().stream().anyMatch(b -> b.type().endsWith(".processing") || b.type().endsWith(".pending")));
  }
}
