package dev.claimd.examples;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.ByteString;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.claimd.client.ClaimdClient;
import dev.claimd.client.Effect;
import dev.claimd.client.GuardResult;
import dev.claimd.client.PermanentException;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.Delivery;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.System.Logger.Level;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;

/**
 * Receiver is a Stripe webhook receiver that writes one ledger row per event,
 * however often Stripe delivers it: the JDK's HTTP server, a ledger in SQLite,
 * and claimd's guard in between, whose effect commits the row together with
 * claimd's fence for the delivery.
 *
 * <pre>
 * java -cp ... dev.claimd.examples.Receiver --claimd 127.0.0.1:50051 --listen 127.0.0.1:8000 [--db ledger.db]
 * </pre>
 *
 * <p>POST /webhooks/stripe with a Stripe event ({"id": "evt_...", "type": ...,
 * "data": {"object": {"amount": ...}}}). The raw delivery goes to claimd, which
 * derives the key from the body's "id" (never from Stripe-Signature, which
 * changes on every retry) and answers whether this delivery is the first.
 */
public final class Receiver {
  private static final System.Logger LOG = System.getLogger("receiver");
  /** MAX_BODY refuses anything larger: Stripe events are far smaller. */
  static final int MAX_BODY = 1 << 20;
  /**
   * DEFAULT_LISTEN is the receiver's address unless --listen says otherwise:
   * beside `make run`, whose claimd holds 127.0.0.1:50051 (gRPC) and
   * 127.0.0.1:8080 (HTTP), so neither of those.
   */
  static final String DEFAULT_LISTEN = "127.0.0.1:8000";

  private Receiver() {}

  /**
   * Ledger is the side effect: an append-only table of bookings in a SQLite
   * file. The handler writes its row through the guard's effect, in one
   * transaction with claimd's fence row for the delivery, so a receiver that
   * dies between its commit and its settle is not repeated: the next holder
   * finds the fence and settles with the stored answer.
   */
  public static final class Ledger {
    /** Booking is one row: what an event booked (+ money in, − money out, 0 a status). */
    public record Booking(String eventId, String type, String objectId, String orderId, long amount) {}

    static final String SCHEMA = "CREATE TABLE IF NOT EXISTS ledger ("
        + "row INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, type TEXT NOT NULL, "
        + "object_id TEXT NOT NULL, order_id TEXT NOT NULL, amount INTEGER NOT NULL)";

    private final String url;

    private Ledger(String url) {
      this.url = url;
    }

    /** open opens (and creates, when missing) the ledger in the SQLite file at path. */
    public static Ledger open(Path path) throws SQLException {
      Ledger l = new Ledger("jdbc:sqlite:" + path.toAbsolutePath());
      try (Connection c = l.connect(); Statement st = c.createStatement()) {
        st.execute(SCHEMA);
      }
      return l;
    }

    /**
     * connect opens a connection of one delivery. Writers queue for SQLite's
     * write lock (the effect begins with BEGIN IMMEDIATE) for up to 30 s.
     */
    public Connection connect() throws SQLException {
      Properties p = new Properties();
      p.setProperty("busy_timeout", "30000");
      return DriverManager.getConnection(url, p);
    }

    /** append writes one row on c (inside the delivery's effect) and returns its number. */
    static long append(Connection c, Booking b) throws SQLException {
      try (PreparedStatement st = c.prepareStatement(
          "INSERT INTO ledger (event_id, type, object_id, order_id, amount) VALUES (?, ?, ?, ?, ?)",
          Statement.RETURN_GENERATED_KEYS)) {
        st.setString(1, b.eventId());
        st.setString(2, b.type());
        st.setString(3, b.objectId());
        st.setString(4, b.orderId());
        st.setLong(5, b.amount());
        st.executeUpdate();
        try (ResultSet keys = st.getGeneratedKeys()) {
          keys.next();
          return keys.getLong(1);
        }
      }
    }

    /** refunded is how much the refunds of a charge booked out so far, read on c (inside the effect). */
    static long refunded(Connection c, String charge) throws SQLException {
      return -sum(c, "SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE object_id = ? AND type = 'charge.refunded'", charge);
    }

    /** rows counts the rows written for eventId. */
    public long rows(String eventId) throws SQLException {
      try (Connection c = connect()) {
        return sum(c, "SELECT count(*) FROM ledger WHERE event_id = ?", eventId);
      }
    }

    /** balance is the sum booked for an order. */
    public long balance(String orderId) throws SQLException {
      try (Connection c = connect()) {
        return sum(c, "SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE order_id = ?", orderId);
      }
    }

    /** bookings are every row, oldest first. */
    public List<Booking> bookings() throws SQLException {
      List<Booking> out = new ArrayList<>();
      try (Connection c = connect(); Statement st = c.createStatement();
          ResultSet rs = st.executeQuery("SELECT event_id, type, object_id, order_id, amount FROM ledger ORDER BY row")) {
        while (rs.next()) {
          out.add(new Booking(rs.getString(1), rs.getString(2), rs.getString(3), rs.getString(4), rs.getLong(5)));
        }
      }
      return out;
    }

    private static long sum(Connection c, String sql, String arg) throws SQLException {
      try (PreparedStatement st = c.prepareStatement(sql)) {
        st.setString(1, arg);
        try (ResultSet rs = st.executeQuery()) {
          rs.next();
          return rs.getLong(1);
        }
      }
    }
  }

  /** start serves the receiver on address (port 0: any free one) until the server is stopped. */
  public static HttpServer start(InetSocketAddress address, ClaimdClient claimd, Ledger ledger, String namespace)
      throws IOException {
    HttpServer server = HttpServer.create(address, 0);
    server.createContext("/webhooks/stripe", exchange -> {
      try (exchange) {
        handle(exchange, claimd, ledger, namespace);
      }
    });
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.start();
    return server;
  }

  private static void handle(HttpExchange ex, ClaimdClient claimd, Ledger ledger, String namespace) throws IOException {
    if (!ex.getRequestMethod().equals("POST") || !ex.getRequestURI().getPath().equals("/webhooks/stripe")) {
      answer(ex, 404, "not found\n".getBytes(StandardCharsets.UTF_8), null);
      return;
    }
    byte[] body;
    try (InputStream in = ex.getRequestBody()) {
      body = in.readNBytes(MAX_BODY + 1);
    }
    if (body.length > MAX_BODY) {
      answer(ex, 413, "too large\n".getBytes(StandardCharsets.UTF_8), null);
      return;
    }
    JsonObject event;
    try {
      JsonElement parsed = JsonParser.parseString(new String(body, StandardCharsets.UTF_8));
      event = parsed.isJsonObject() ? parsed.getAsJsonObject() : null;
    } catch (RuntimeException e) {
      event = null;
    }
    if (event == null || !event.has("id") || !event.get("id").isJsonPrimitive()) {
      answer(ex, 400, "not a Stripe event\n".getBytes(StandardCharsets.UTF_8), null);
      return;
    }
    // In production, verify Stripe-Signature here, before claiming.
    Delivery.Builder delivery = Delivery.newBuilder().setBody(ByteString.copyFrom(body));
    ex.getRequestHeaders().forEach((name, values) -> delivery.putHeaders(name, String.join(", ", values)));
    ClaimRequest req = ClaimRequest.newBuilder().setNamespace(namespace).setProvider("stripe").setDelivery(delivery).build();

    JsonObject evt = event;
    String id = evt.get("id").getAsString();
    GuardResult r = claimd.guard(req, ctx -> {
      JsonElement amount = amountOf(evt);
      if (amount == null) {
        // Retrying cannot fix the event: record it FAILED, answer 200.
        throw new PermanentException("event " + id + " has no integer data.object.amount");
      }
      JsonObject obj = evt.getAsJsonObject("data").getAsJsonObject("object");
      String type = string(evt, "type");
      String objectId = string(obj, "id");
      String orderId = obj.has("metadata") && obj.get("metadata").isJsonObject() ? string(obj.getAsJsonObject("metadata"), "order_id") : "";
      try (Connection db = ledger.connect()) {
        // The row and claimd's fence commit together. A holder that died
        // after its commit and before its settle left the fence: then this
        // effect is done, the function does not run, and the guard settles
        // with the answer stored then.
        Effect fx = ctx.effect(db, e -> {
          long booked = booked(db, type, objectId, obj, amount.getAsLong());
          e.setResult(Map.of("ledger_row", Ledger.append(db, new Ledger.Booking(id, type, objectId, orderId, booked))));
        });
        return fx.result();
      }
    });
    LOG.log(r.status() >= 400 ? Level.WARNING : Level.INFO, "{0} -> {1} {2} ran={3} error={4}",
        id, r.status(), r.disposition(), r.ran(), r.error());
    answer(ex, r.status(), r.body(), r);
  }

  /**
   * booked is what an event books. A charge that succeeded brings its amount
   * in; a refund takes out what was refunded since the last one
   * (charge.refunded carries the running amount_refunded); anything else moves
   * nothing. No ordering logic: claimd's Stripe lifecycles never run a refund
   * before its charge succeeded (DEFERRED: 409 with Retry-After, Stripe
   * retries), never a stale event (SUPERSEDED: 200), and one event of a charge
   * at a time, so reading the refunds booked so far is safe (and it is read in
   * the effect's transaction).
   */
  static long booked(Connection db, String type, String objectId, JsonObject obj, long amount) throws SQLException {
    return switch (type) {
      case "charge.succeeded" -> amount;
      case "charge.refunded" -> -((obj.has("amount_refunded") ? obj.get("amount_refunded").getAsLong() : 0)
          - Ledger.refunded(db, objectId));
      default -> 0;
    };
  }

  private static String string(JsonObject o, String field) {
    JsonElement e = o.get(field);
    return e != null && e.isJsonPrimitive() ? e.getAsString() : "";
  }

  private static JsonElement amountOf(JsonObject event) {
    try {
      JsonElement a = event.getAsJsonObject("data").getAsJsonObject("object").get("amount");
      if (a != null && a.isJsonPrimitive() && a.getAsJsonPrimitive().isNumber()
          && a.getAsBigDecimal().stripTrailingZeros().scale() <= 0) {
        return a;
      }
    } catch (RuntimeException notAnObject) {
      // data or data.object missing or not an object
    }
    return null;
  }

  /** answer writes status, Retry-After (when the guard gives one), and the body. */
  static void answer(HttpExchange ex, int status, byte[] body, GuardResult r) throws IOException {
    if (r != null && r.retryAfter().isPresent()) {
      ex.getResponseHeaders().set("Retry-After", Long.toString(r.retryAfter().getAsLong()));
    }
    ex.getResponseHeaders().set("Content-Type", status == 200 ? "application/json" : "text/plain; charset=utf-8");
    ex.sendResponseHeaders(status, body.length == 0 ? -1 : body.length);
    try (OutputStream out = ex.getResponseBody()) {
      out.write(body);
    }
  }

  /**
   * main serves until SIGTERM or Ctrl-C: --claimd host:port, --listen
   * host:port, --namespace name, --db ledger file (default ledger.db).
   */
  public static void main(String[] args) throws Exception {
    String target = "127.0.0.1:50051";
    String listen = DEFAULT_LISTEN;
    String namespace = "billing";
    String db = "ledger.db";
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--claimd" -> target = args[i + 1];
        case "--listen" -> listen = args[i + 1];
        case "--namespace" -> namespace = args[i + 1];
        case "--db" -> db = args[i + 1];
        default -> throw new IllegalArgumentException("unknown flag " + args[i]);
      }
    }
    int colon = listen.lastIndexOf(':');
    InetSocketAddress address = new InetSocketAddress(listen.substring(0, colon), Integer.parseInt(listen.substring(colon + 1)));
    ClaimdClient claimd = ClaimdClient.builder(target).build();
    HttpServer server = start(address, claimd, Ledger.open(Path.of(db)), namespace);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      server.stop(5); // let deliveries in flight finish and settle
      claimd.close();
      stopped.countDown();
    }));
    LOG.log(Level.INFO, "receiving on http://{0}/webhooks/stripe (claimd {1}, ledger {2})", listen, target, db);
    stopped.await();
  }
}
