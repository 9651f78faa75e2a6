package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.protobuf.Any;
import com.google.protobuf.Timestamp;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.client.testing.TestDatabases;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.Delivery;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.Outcome;
import dev.claimd.idempotency.v1.Reason;
import dev.claimd.idempotency.v1.Record;
import dev.claimd.idempotency.v1.TransitionRequest;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The guard contract's scenarios (clients/guardspec/scenarios.json, format in
 * clients/guardspec/README.md) against a real claimd. The file is read
 * strictly: a field this runner does not know fails the run, so the file cannot
 * say more than the runners check.
 */
class GuardSpecTest {
  static final String NS = "java-guardspec";
  static final Path SPEC = Path.of("..", "guardspec", "scenarios.json");
  static final List<String> STATES = List.of("RECEIVED", "VALIDATED", "PROCESSING", "SETTLED", "FAILED");
  static final List<String> CALLS = List.of("claim", "start", "settle", "fail", "release", "renew");
  /** EXPECTED_CALLS are the names expect.calls may list: the faults' calls, a settle with effect_recovered, the handler. */
  static final List<String> EXPECTED_CALLS = List.of("claim", "start", "settle", "fail", "release", "renew",
      "settle_recovered", "handler");
  /** DIALECTS are the databases an effect scenario runs on, each once. */
  static final List<String> DIALECTS = List.of("sqlite", "postgres");

  static TestClaimd server;
  static ClaimdClient plain; // the other holder, and the reader of records
  static JsonObject spec;

  @BeforeAll
  static void start() throws Exception {
    spec = loadSpec();
    server = TestClaimd.start();
    plain = ClaimdClient.builder(server.target()).holder("guardspec-plain").build();
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

  // --- reading the file strictly ----------------------------------------------

  static final class SpecError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    SpecError(String m) {
      super(m);
    }
  }

  static JsonObject fields(JsonElement v, String where, List<String> required, List<String> optional) {
    if (v == null || !v.isJsonObject()) {
      throw new SpecError(where + ": want an object");
    }
    JsonObject o = v.getAsJsonObject();
    for (String k : o.keySet()) {
      if (!required.contains(k) && !optional.contains(k)) {
        throw new SpecError(where + ": unknown field " + k);
      }
    }
    for (String k : required) {
      if (!o.has(k)) {
        throw new SpecError(where + ": missing field " + k);
      }
    }
    return o;
  }

  static String text(JsonElement v, String where) {
    if (v.isJsonPrimitive() && v.getAsJsonPrimitive().isString()) {
      return v.getAsString();
    }
    JsonObject r = fields(v, where, List.of("repeat", "times"), List.of("prefix"));
    String repeat = r.get("repeat").getAsString();
    int times = r.get("times").getAsInt();
    if (repeat.isEmpty() || times <= 0) {
      throw new SpecError(where + ": repeat and a positive times are required");
    }
    return (r.has("prefix") ? r.get("prefix").getAsString() : "") + repeat.repeat(times);
  }

  static byte[] body(JsonElement v, String where) {
    JsonObject b = fields(v, where, List.of(), List.of("text", "b64"));
    if (b.size() != 1) {
      throw new SpecError(where + ": want exactly one of text and b64");
    }
    return b.has("text")
        ? text(b.get("text"), where + ".text").getBytes(StandardCharsets.UTF_8)
        : Base64.getDecoder().decode(b.get("b64").getAsString());
  }

  static void checkScenario(JsonElement sc, String where, int rowCount) {
    JsonObject s = fields(sc, where, List.of("name", "row", "deliveries", "handler_runs"),
        List.of("doc", "unreachable", "arrange", "effect", "pending"));
    if (s.has("pending")) {
      JsonObject pending = fields(s.get("pending"), where + ".pending", List.of(), List.of("go", "python", "typescript", "java"));
      for (String lang : pending.keySet()) {
        if (!pending.get(lang).isJsonPrimitive() || pending.get(lang).getAsString().isEmpty()) {
          throw new SpecError(where + ".pending." + lang + ": want why, a non-empty string");
        }
      }
    }
    boolean effect = s.has("effect") && s.get("effect").getAsBoolean();
    int row = s.get("row").getAsInt();
    if (row < 1 || row > rowCount) {
      throw new SpecError(where + ": row " + row + " is not a row of GUARD.md (1.." + rowCount + ")");
    }
    JsonArray arrange = s.has("arrange") ? s.getAsJsonArray("arrange") : new JsonArray();
    for (int i = 0; i < arrange.size(); i++) {
      String w = where + ".arrange[" + i + "]";
      String op = fields(arrange.get(i), w, List.of("op"), List.of("lease_ms", "to", "result")).get("op").getAsString();
      switch (op) {
        case "claim" -> fields(arrange.get(i), w, List.of("op", "lease_ms"), List.of());
        case "transition" -> {
          JsonObject t = fields(arrange.get(i), w, List.of("op", "to"), List.of("result"));
          if (!STATES.contains(t.get("to").getAsString())) {
            throw new SpecError(w + ": unknown state " + t.get("to"));
          }
          if (t.has("result")) {
            body(t.get("result"), w + ".result");
          }
        }
        case "release" -> fields(arrange.get(i), w, List.of("op"), List.of());
        case "fence" -> {
          if (!effect) {
            throw new SpecError(w + ": fence needs \"effect\": true");
          }
          body(fields(arrange.get(i), w, List.of("op", "result"), List.of()).get("result"), w + ".result");
        }
        default -> throw new SpecError(w + ": unknown op " + op);
      }
    }
    JsonArray deliveries = s.getAsJsonArray("deliveries");
    if (deliveries.isEmpty()) {
      throw new SpecError(where + ": at least one delivery");
    }
    for (int i = 0; i < deliveries.size(); i++) {
      String w = where + ".deliveries[" + i + "]";
      JsonObject d = fields(deliveries.get(i), w, List.of("expect"), List.of("request", "handler", "faults"));
      if (d.has("request")) {
        JsonObject r = fields(d.get("request"), w + ".request", List.of(),
            List.of("provider", "body", "headers", "lease_ms", "wait_ms", "event_id", "entity_id", "event_type"));
        if (r.has("body")) {
          text(r.get("body"), w + ".request.body");
          if (r.has("event_id")) {
            throw new SpecError(w + ".request: event_id and body are exclusive");
          }
        }
      }
      if (d.has("handler")) {
        JsonObject h = fields(d.get("handler"), w + ".handler", List.of(),
            List.of("returns", "raises", "settle_itself", "fail_itself", "taken_over", "outlive_lease", "effect"));
        if (h.has("effect")) {
          if (!effect) {
            throw new SpecError(w + ".handler.effect: needs \"effect\": true on the scenario");
          }
          if (h.has("returns") || h.has("raises")) {
            throw new SpecError(w + ".handler: effect is not with returns or raises");
          }
          JsonObject fx = fields(h.get("effect"), w + ".handler.effect", List.of(), List.of("result", "raises"));
          if (fx.has("result")) {
            value(fx.get("result"), w + ".handler.effect.result");
          }
          if (fx.has("raises")) {
            text(fields(fx.get("raises"), w + ".handler.effect.raises", List.of("message"), List.of()).get("message"),
                w + ".handler.effect.raises.message");
          }
        } else if (h.has("returns") == h.has("raises")) {
          throw new SpecError(w + ".handler: want exactly one of returns and raises");
        }
        if (h.has("returns")) {
          value(h.get("returns"), w + ".handler.returns");
        } else if (h.has("raises")) {
          text(fields(h.get("raises"), w + ".handler.raises", List.of("message"), List.of("permanent")).get("message"),
              w + ".handler.raises.message");
        }
        for (String k : List.of("settle_itself", "fail_itself")) {
          if (h.has(k)) {
            body(h.get(k), w + ".handler." + k);
          }
        }
      }
      JsonArray faults = d.has("faults") ? d.getAsJsonArray("faults") : new JsonArray();
      for (int j = 0; j < faults.size(); j++) {
        JsonObject f = fields(faults.get(j), w + ".faults[" + j + "]", List.of("call", "code"), List.of("reason", "retry_delay_ms"));
        if (!CALLS.contains(f.get("call").getAsString())) {
          throw new SpecError(w + ".faults[" + j + "]: unknown call " + f.get("call"));
        }
        Status.Code.valueOf(f.get("code").getAsString()); // throws on an unknown code
      }
      JsonObject e = fields(d.get("expect"), w + ".expect", List.of("status", "body", "ran"),
          List.of("retry_after", "claim", "record", "calls", "effect"));
      if (e.has("effect")) {
        if (!effect) {
          throw new SpecError(w + ".expect.effect: needs \"effect\": true on the scenario");
        }
        JsonObject fx = fields(e.get("effect"), w + ".expect.effect", List.of(), List.of("done", "ledger_rows", "fence"));
        if (fx.has("fence") && !fx.get("fence").isJsonNull()) {
          body(fields(fx.get("fence"), w + ".expect.effect.fence", List.of("fencing_token", "result"), List.of()).get("result"),
              w + ".expect.effect.fence.result");
        }
      }
      if (e.has("calls")) {
        for (JsonElement c : e.getAsJsonArray("calls")) {
          if (!EXPECTED_CALLS.contains(c.getAsString())) {
            throw new SpecError(w + ".expect.calls: unknown call " + c);
          }
        }
      }
      body(e.get("body"), w + ".expect.body");
      if (e.has("retry_after") && e.get("retry_after").isJsonObject()) {
        fields(e.get("retry_after"), w + ".expect.retry_after", List.of("min", "max"), List.of());
      }
      if (e.has("claim")) {
        fields(e.get("claim"), w + ".expect.claim", List.of(), List.of("outcome", "reason", "state", "fencing_token"));
      }
      if (e.has("record")) {
        JsonObject rec = fields(e.get("record"), w + ".expect.record", List.of(), List.of("state", "released", "fencing_token", "result"));
        if (rec.has("result")) {
          body(rec.get("result"), w + ".expect.record.result");
        }
      }
    }
  }

  /** value checks a Value: exactly one of text, b64, json, none. */
  static void value(JsonElement v, String where) {
    JsonObject o = fields(v, where, List.of(), List.of("text", "b64", "json", "none"));
    if (o.size() != 1) {
      throw new SpecError(where + ": want exactly one of text, b64, json, none");
    }
    if (o.has("text")) {
      text(o.get("text"), where + ".text");
    }
  }

  static JsonObject loadSpec() throws IOException {
    JsonObject top = fields(JsonParser.parseString(Files.readString(SPEC)), SPEC.toString(),
        List.of("doc", "constants", "effects", "row_count", "uncovered_rows", "scenarios"), List.of());
    JsonObject fx = fields(top.get("effects"), "effects", List.of("schema", "ledger_schema", "effect_keys"), List.of("doc"));
    fields(fx.get("schema"), "effects.schema", List.of("postgres", "sqlite"), List.of("mysql"));
    JsonArray keys = fx.getAsJsonArray("effect_keys");
    for (int i = 0; i < keys.size(); i++) {
      fields(keys.get(i), "effects.effect_keys[" + i + "]", List.of("namespace", "provider", "key", "step", "effect_key"), List.of());
    }
    JsonObject c = fields(top.get("constants"), "constants", List.of("max_result_bytes", "max_failure_text_bytes",
        "unavailable_retry_after_s", "superseded_retry_after_s", "heartbeat_divisor", "heartbeat_floor_ms", "retry"), List.of());
    fields(c.get("retry"), "constants.retry", List.of("max_attempts", "base_backoff_ms", "max_backoff_ms", "multiplier",
        "total_timeout_ms", "attempt_timeout_ms"), List.of());
    Set<String> names = new HashSet<>();
    JsonArray scenarios = top.getAsJsonArray("scenarios");
    for (int i = 0; i < scenarios.size(); i++) {
      checkScenario(scenarios.get(i), "scenarios[" + i + "]", top.get("row_count").getAsInt());
      String name = scenarios.get(i).getAsJsonObject().get("name").getAsString();
      if (!names.add(name)) {
        throw new SpecError("scenarios[" + i + "]: name " + name + " is not unique");
      }
    }
    return top;
  }

  // --- the file ----------------------------------------------------------------

  @Test
  void everyRowHasAScenarioOrAReasonWhyNoneCan() {
    Set<Integer> covered = new HashSet<>();
    spec.getAsJsonArray("scenarios").forEach(s -> covered.add(s.getAsJsonObject().get("row").getAsInt()));
    JsonObject excused = spec.getAsJsonObject("uncovered_rows");
    for (int row = 1; row <= spec.get("row_count").getAsInt(); row++) {
      assertNotEquals(covered.contains(row), excused.has(String.valueOf(row)),
          "GUARD.md row " + row + ": covered " + covered.contains(row) + ", excused " + excused.has(String.valueOf(row)) + "; want exactly one");
    }
  }

  @Test
  void aFieldTheRunnerDoesNotKnowFailsIt() {
    JsonObject sc = spec.getAsJsonArray("scenarios").get(0).deepCopy().getAsJsonObject();
    sc.getAsJsonArray("deliveries").get(0).getAsJsonObject().getAsJsonObject("expect").addProperty("stauts", 200);
    SpecError e = assertThrows(SpecError.class, () -> checkScenario(sc, "scenario", spec.get("row_count").getAsInt()));
    assertTrue(e.getMessage().contains("stauts"), e.getMessage());
  }

  @Test
  void thisClientsConstantsAreTheContracts() {
    JsonObject c = spec.getAsJsonObject("constants");
    JsonObject r = c.getAsJsonObject("retry");
    assertEquals(c.get("max_result_bytes").getAsInt(), Guard.MAX_RESULT_BYTES);
    assertEquals(c.get("max_failure_text_bytes").getAsInt(), Guard.MAX_FAILURE_BYTES);
    assertEquals(c.get("unavailable_retry_after_s").getAsInt(), Guard.UNAVAILABLE_RETRY_AFTER_S);
    assertEquals(c.get("superseded_retry_after_s").getAsInt(), Guard.TAKEN_OVER_RETRY_AFTER_S);
    assertEquals(c.get("heartbeat_divisor").getAsInt(), Guard.HEARTBEAT_DIVISOR);
    assertEquals(c.get("heartbeat_floor_ms").getAsLong(), Guard.MIN_HEARTBEAT.toMillis());
    RetryPolicy p = RetryPolicy.DEFAULT;
    assertEquals(r.get("max_attempts").getAsInt(), p.maxAttempts());
    assertEquals(r.get("base_backoff_ms").getAsLong(), p.baseBackoff().toMillis());
    assertEquals(r.get("max_backoff_ms").getAsLong(), p.maxBackoff().toMillis());
    assertEquals(r.get("multiplier").getAsInt(), RetryPolicy.MULTIPLIER);
    assertEquals(r.get("total_timeout_ms").getAsLong(), p.totalTimeout().toMillis());
    assertEquals(r.get("attempt_timeout_ms").getAsLong(), p.attemptTimeout().toMillis());
    // Full jitter: uniform in [0, min(cap, base × multiplier^(n−1))].
    for (int n = 1; n <= 6; n++) {
      long ceiling = Math.min(r.get("max_backoff_ms").getAsLong(),
          r.get("base_backoff_ms").getAsLong() * (long) Math.pow(r.get("multiplier").getAsInt(), n - 1));
      assertEquals(ceiling, p.backoffCeiling(n).toMillis(), "ceiling before retry " + n);
      assertEquals(0, p.backoff(n, () -> 0).toNanos(), "the lowest draw before retry " + n);
      assertEquals(ceiling * 1_000_000 - 1, p.backoff(n, () -> 1 - 1e-12).toNanos(), 1_000, "the highest draw before retry " + n);
    }
    assertEquals(Duration.ofSeconds(1), Guard.every(Duration.ofSeconds(3)));
    assertEquals(Guard.MIN_HEARTBEAT, Guard.every(Duration.ofMillis(1)));
  }

  @Test
  void thisClientsEffectSchemaIsTheContracts() {
    JsonObject schema = spec.getAsJsonObject("effects").getAsJsonObject("schema");
    assertEquals(schema.get("postgres").getAsString(), Effects.POSTGRES_SCHEMA);
    assertEquals(schema.get("sqlite").getAsString(), Effects.SQLITE_SCHEMA);
    assertEquals(Effects.POSTGRES_SCHEMA, Effects.Dialect.POSTGRES.schema());
    assertEquals(Effects.SQLITE_SCHEMA, Effects.Dialect.SQLITE.schema());
  }

  @Test
  void effectKeysAreTheContracts() {
    JsonArray vectors = spec.getAsJsonObject("effects").getAsJsonArray("effect_keys");
    assertFalse(vectors.isEmpty(), "no effect_keys vectors");
    for (JsonElement el : vectors) {
      JsonObject v = el.getAsJsonObject();
      String got = Effects.effectKey(v.get("namespace").getAsString(), v.get("provider").getAsString(),
          v.get("key").getAsString(), v.get("step").getAsString());
      assertEquals(v.get("effect_key").getAsString(), got, "effectKey(" + v + ")");
      assertEquals(39, got.length(), got);
    }
  }

  // --- faults ----------------------------------------------------------------------

  /**
   * Faults fails the named calls of the guard's client, every attempt, without
   * sending them, and logs every attempt of a write in log (where the handler
   * logs "handler" too).
   */
  static final class Faults implements ClientInterceptor {
    volatile List<JsonObject> active = List.of();
    final List<String> log;

    Faults(List<String> log) {
      this.log = log;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ClientCall<>() {
        private Listener<R> listener;
        private Metadata headers;
        private ClientCall<Q, R> real;
        private int requested;
        private boolean closed;

        @Override
        public void start(Listener<R> l, Metadata h) {
          listener = l;
          headers = h;
        }

        @Override
        public void request(int n) {
          if (real != null) {
            real.request(n);
          } else {
            requested += n;
          }
        }

        @Override
        public void sendMessage(Q message) {
          String call = callName(method, message);
          if (EXPECTED_CALLS.contains(call)) {
            log.add(call);
          }
          JsonObject f = find("settle_recovered".equals(call) ? "settle" : call);
          if (f != null) {
            closed = true;
            StatusRuntimeException e = injected(f);
            listener.onClose(e.getStatus(), e.getTrailers());
            return;
          }
          real = next.newCall(method, options);
          real.start(listener, headers);
          if (requested > 0) {
            real.request(requested);
          }
          real.sendMessage(message);
        }

        @Override
        public void halfClose() {
          if (real != null) {
            real.halfClose();
          }
        }

        @Override
        public void cancel(String message, Throwable cause) {
          if (real != null) {
            real.cancel(message, cause);
          } else if (!closed) {
            closed = true;
            listener.onClose(Status.CANCELLED.withDescription(message).withCause(cause), new Metadata());
          }
        }
      };
    }

    private JsonObject find(String call) {
      for (JsonObject f : active) {
        if (f.get("call").getAsString().equals(call)) {
          return f;
        }
      }
      return null;
    }

    private static String callName(MethodDescriptor<?, ?> m, Object message) {
      String name = m.getBareMethodName();
      if (!"Transition".equals(name)) {
        return name == null ? "" : name.toLowerCase(java.util.Locale.ROOT);
      }
      TransitionRequest t = (TransitionRequest) message;
      return switch (t.getTo()) {
        case EVENT_STATE_PROCESSING -> "start";
        case EVENT_STATE_SETTLED -> t.getEffectRecovered() ? "settle_recovered" : "settle";
        case EVENT_STATE_FAILED -> "fail";
        default -> "";
      };
    }

    private static StatusRuntimeException injected(JsonObject f) {
      com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder()
          .setCode(Status.Code.valueOf(f.get("code").getAsString()).value())
          .setMessage("injected by guardspec");
      if (f.has("reason")) {
        st.addDetails(Any.pack(ErrorInfo.newBuilder().setReason(f.get("reason").getAsString())
            .setDomain(ClaimdException.ERROR_DOMAIN).build()));
      }
      if (f.has("retry_delay_ms")) {
        st.addDetails(Any.pack(RetryInfo.newBuilder()
            .setRetryDelay(ClaimdClient.protoDuration(Duration.ofMillis(f.get("retry_delay_ms").getAsLong()))).build()));
      }
      return StatusProto.toStatusRuntimeException(st.build());
    }
  }

  // --- running the scenarios ----------------------------------------------------------

  static final class Run {
    final String evt = "evt_spec_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8));
    int runs;
    final List<String> problems = new ArrayList<>();
    /** calls is this delivery's writes and the handler's run, in order. */
    final List<String> calls = java.util.Collections.synchronizedList(new ArrayList<>());
    Lease other;
    /** db is the handler's database in an effect scenario (null otherwise); the guard's effect uses it. */
    Connection db;
    /** effectDone is whether this delivery's effect found a committed fence (null: no effect ran). */
    Boolean effectDone;
  }

  // --- the runner's databases ----------------------------------------------------------

  /** Database is one dialect's database for the effect scenarios, made once per run and fresh (no claimd_effects). */
  record Database(String dialect, String url) {
    Connection open() throws SQLException {
      return TestDatabases.open(url);
    }
  }

  static final Map<String, Database> DATABASES = new java.util.concurrent.ConcurrentHashMap<>();

  /**
   * database is the dialect's database: a SQLite file of its own, or a new
   * database on $CLAIMD_TEST_POSTGRES_URL's server (failing, never skipping,
   * without it). It holds the ledger and no fence table: the first effect
   * scenario proves that the guard creates it.
   */
  static synchronized Database database(String dialect) throws Exception {
    Database d = DATABASES.get(dialect);
    if (d != null) {
      return d;
    }
    String url = dialect.equals("sqlite")
        ? "sqlite:" + Files.createTempDirectory("claimd-java-guardspec-").resolve("guardspec.db")
        : TestDatabases.freshPostgres("java_guardspec");
    d = new Database(dialect, url);
    try (Connection c = d.open(); Statement st = c.createStatement()) {
      st.execute(spec.getAsJsonObject("effects").get("ledger_schema").getAsString());
      assertFalse(tableExists(c, Effects.TABLE), dialect + ": a fresh database already has " + Effects.TABLE);
    }
    DATABASES.put(dialect, d);
    return d;
  }

  static boolean tableExists(Connection c, String table) throws SQLException {
    try (ResultSet rs = c.getMetaData().getTables(null, null, table, null)) {
      return rs.next();
    }
  }

  @TestFactory
  Stream<DynamicTest> theGuardCreatesTheFenceTableOnFirstUse() {
    // Its own fresh database per dialect: no order among the tests is relied on.
    return DIALECTS.stream().map(dialect -> DynamicTest.dynamicTest(dialect, () -> {
      String url = dialect.equals("sqlite")
          ? "sqlite:" + Files.createTempDirectory("claimd-java-fresh-").resolve("fresh.db")
          : TestDatabases.freshPostgres("java_fresh");
      try (Connection c = TestDatabases.open(url); ClaimdClient client = ClaimdClient.builder(server.target()).logger(Quiet.LOGGER).build()) {
        assertFalse(tableExists(c, Effects.TABLE), "before the first effect");
        Run run = new Run();
        GuardResult r = client.guard(claimInput(run, new JsonObject()), ctx -> ctx.effect(c, fx -> fx.setResult("first")).result());
        assertEquals(200, r.status(), () -> "status (error " + r.error() + ")");
        assertTrue(tableExists(c, Effects.TABLE), "after the first effect");
        assertEquals(1, fenceCount(c, r.claim().key()), "fence rows");
      }
    }));
  }

  static int fenceCount(Connection c, String key) throws SQLException {
    try (PreparedStatement st = c.prepareStatement("SELECT count(*) FROM claimd_effects WHERE namespace = ? AND key = ?")) {
      st.setString(1, NS);
      st.setString(2, key);
      try (ResultSet rs = st.executeQuery()) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  static String closedPort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return "127.0.0.1:" + s.getLocalPort();
    }
  }

  static ClaimRequest claimInput(Run run, JsonObject request) {
    ClaimRequest.Builder b = ClaimRequest.newBuilder().setNamespace(NS)
        .setProvider(request.has("provider") ? request.get("provider").getAsString() : "stripe");
    if (request.has("body")) {
      Delivery.Builder d = Delivery.newBuilder()
          .setBody(com.google.protobuf.ByteString.copyFromUtf8(text(request.get("body"), "body").replace("{event_id}", run.evt)));
      if (request.has("headers")) {
        for (Map.Entry<String, JsonElement> h : request.getAsJsonObject("headers").entrySet()) {
          d.putHeaders(h.getKey(), h.getValue().getAsString());
        }
      }
      b.setDelivery(d);
    } else {
      b.setEventId(request.has("event_id") ? request.get("event_id").getAsString().replace("{event_id}", run.evt) : run.evt);
    }
    if (request.has("entity_id")) {
      b.setEntityId(request.get("entity_id").getAsString().replace("{event_id}", run.evt));
    }
    if (request.has("event_type")) {
      b.setEventType(request.get("event_type").getAsString());
    }
    if (request.has("lease_ms")) {
      b.setLease(ClaimdClient.protoDuration(Duration.ofMillis(request.get("lease_ms").getAsLong())));
    }
    if (request.has("wait_ms")) {
      b.setWait(ClaimdClient.protoDuration(Duration.ofMillis(request.get("wait_ms").getAsLong())));
    }
    return b.build();
  }

  static void arrange(Run run, JsonObject step) throws SQLException {
    switch (step.get("op").getAsString()) {
      case "claim" -> {
        Claim c = plain.claim(ClaimRequest.newBuilder().setNamespace(NS).setProvider("stripe").setEventId(run.evt)
            .setLease(ClaimdClient.protoDuration(Duration.ofMillis(step.get("lease_ms").getAsLong())))
            .setHolder("guardspec-other").build());
        assertEquals(Outcome.OUTCOME_ACQUIRED, c.outcome(), "arrange: claim");
        run.other = c.lease();
      }
      case "transition" -> plain.transition(run.other, EventState.valueOf("EVENT_STATE_" + step.get("to").getAsString()),
          step.has("result") ? body(step.get("result"), "result") : null);
      case "fence" -> fence(run, body(step.get("result"), "result"));
      default -> plain.release(run.other);
    }
  }

  /**
   * fence is the other holder committing its effect without the guard: one
   * transaction with a ledger row for the key and the fence row with that
   * holder's token and result. Then it vanishes without settling.
   */
  static void fence(Run run, byte[] result) throws SQLException {
    Connection c = run.db;
    try (Statement st = c.createStatement()) {
      // The guard creates the table on first use; this holder is not a guard.
      st.execute(Effects.Dialect.of(c).schema());
    }
    c.setAutoCommit(false);
    try {
      insertLedger(c, run.other.key(), "guardspec-other");
      try (PreparedStatement st = c.prepareStatement(
          "INSERT INTO claimd_effects (namespace, provider, key, fencing_token, result) VALUES (?, ?, ?, ?, ?)")) {
        st.setString(1, run.other.namespace());
        st.setString(2, run.other.provider());
        st.setString(3, run.other.key());
        st.setLong(4, run.other.fencingToken());
        st.setBytes(5, result);
        st.executeUpdate();
      }
      c.commit();
    } catch (SQLException | RuntimeException e) {
      c.rollback();
      throw e;
    } finally {
      c.setAutoCommit(true);
    }
  }

  static void insertLedger(Connection c, String key, String writer) throws SQLException {
    try (PreparedStatement st = c.prepareStatement("INSERT INTO guardspec_ledger (namespace, key, writer) VALUES (?, ?, ?)")) {
      st.setString(1, NS);
      st.setString(2, key);
      st.setString(3, writer);
      st.executeUpdate();
    }
  }

  static int ledgerRows(Connection c, String key) throws SQLException {
    try (PreparedStatement st = c.prepareStatement("SELECT count(*) FROM guardspec_ledger WHERE namespace = ? AND key = ?")) {
      st.setString(1, NS);
      st.setString(2, key);
      try (ResultSet rs = st.executeQuery()) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  /** valueOf is a Value as the handler returns it. */
  static Object valueOf(JsonObject v) {
    if (v.has("text")) {
      return text(v.get("text"), "text");
    }
    if (v.has("b64")) {
      return Base64.getDecoder().decode(v.get("b64").getAsString());
    }
    if (v.has("json")) {
      return v.get("json");
    }
    return null;
  }

  /** behave is the scenario's handler. What goes wrong in it is kept in run.problems. */
  static Object behave(Run run, ClaimRequest input, JsonObject h, Guard.GuardContext ctx) throws Exception {
    run.runs++;
    run.calls.add("handler");
    if (h == null) {
      return null;
    }
    if (h.has("settle_itself")) {
      plain.settle(ctx.lease(), body(h.get("settle_itself"), "settle_itself"));
    }
    if (h.has("fail_itself")) {
      plain.fail(ctx.lease(), body(h.get("fail_itself"), "fail_itself"));
    }
    Effect effect = null;
    if (h.has("effect")) {
      JsonObject want = h.getAsJsonObject("effect");
      effect = ctx.effect(run.db, fx -> {
        insertLedger(run.db, ctx.lease().key(), "guardspec");
        if (want.has("result")) {
          fx.setResult(valueOf(want.getAsJsonObject("result")));
        }
        if (want.has("raises")) {
          throw new Exception(text(want.getAsJsonObject("raises").get("message"), "message"));
        }
      });
      run.effectDone = effect.done();
    }
    ClaimRequest competing = input.toBuilder().clearLease().clearWait().clearAttemptId().build();
    if (h.has("taken_over") && h.get("taken_over").getAsBoolean()) {
      plain.release(ctx.lease());
      Claim taker = plain.claim(competing.toBuilder().setHolder("guardspec-taker").build());
      if (!taker.acquired()) {
        run.problems.add("the taker's claim: " + taker.outcome() + ", want ACQUIRED");
      } else {
        try {
          Thread.sleep(10_000); // the guard's cancellation interrupts it
        } catch (InterruptedException cancelled) {
          // what the guard does on a takeover
        }
        if (!ctx.isCancelled()) {
          run.problems.add("the handler was not cancelled within 10s of the takeover");
        }
      }
    }
    if (h.has("outlive_lease") && h.get("outlive_lease").getAsBoolean()) {
      outliveLease(run, competing, ctx.claim());
    }
    if (h.has("raises")) {
      JsonObject r = h.getAsJsonObject("raises");
      String message = text(r.get("message"), "message");
      if (r.has("permanent") && r.get("permanent").getAsBoolean()) {
        throw new PermanentException(message);
      }
      throw new Exception(message);
    }
    if (effect != null) {
      return effect.result();
    }
    return valueOf(h.getAsJsonObject("returns"));
  }

  static long millis(Timestamp t) {
    return t.getSeconds() * 1000 + t.getNanos() / 1_000_000;
  }

  /**
   * outliveLease works until claimd's record shows a renewal past the lease the
   * claim was granted, then checks that a competing claim still meets a live
   * lease. It polls claimd, an observable condition.
   */
  static void outliveLease(Run run, ClaimRequest competing, Claim claim) throws InterruptedException {
    long first = millis(claim.response().getLeaseExpiresAt());
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    for (;;) {
      Record rec = plain.get(NS, claim.provider(), claim.key());
      if (millis(rec.getLeaseExpiresAt()) > first && millis(rec.getUpdatedAt()) > first) {
        break;
      }
      if (System.nanoTime() > deadline) {
        run.problems.add("no renewal past the first lease within 10s");
        return;
      }
      Thread.sleep(50);
    }
    Claim other = plain.claim(competing.toBuilder().setHolder("guardspec-competitor").build());
    if (!other.inProgress()) {
      run.problems.add("a competing claim past the first lease: " + other.outcome() + ", want IN_PROGRESS");
    }
  }

  static String show(byte[] b) {
    String s = new String(b, 0, Math.min(b.length, 80), StandardCharsets.UTF_8);
    return b.length > 80 ? "\"" + s + "\"… (" + b.length + " bytes)" : "\"" + s + "\"";
  }

  static void check(Run run, String what, GuardResult r, boolean ran, JsonObject e) throws SQLException {
    assertEquals(List.of(), run.problems, what + ": inside the handler");
    if (e.has("calls")) {
      List<String> want = new ArrayList<>();
      e.getAsJsonArray("calls").forEach(c -> want.add(c.getAsString()));
      synchronized (run.calls) {
        assertEquals(want, List.copyOf(run.calls), what + ": the guard's calls");
      }
    }
    assertEquals(e.get("status").getAsInt(), r.status(), what + ": status (error " + r.error() + ")");
    if (!e.has("retry_after")) {
      assertFalse(r.retryAfter().isPresent(), what + ": Retry-After " + r.retryAfter() + ", want none");
    } else {
      JsonElement ra = e.get("retry_after");
      long lo = ra.isJsonObject() ? ra.getAsJsonObject().get("min").getAsLong() : ra.getAsLong();
      long hi = ra.isJsonObject() ? ra.getAsJsonObject().get("max").getAsLong() : ra.getAsLong();
      assertTrue(r.retryAfter().isPresent() && lo <= r.retryAfter().getAsLong() && r.retryAfter().getAsLong() <= hi,
          what + ": Retry-After " + r.retryAfter() + ", want " + lo + ".." + hi);
    }
    byte[] want = body(e.get("body"), "body");
    assertArrayEquals(want, r.body(), what + ": body " + show(r.body()) + ", want " + show(want));
    assertTrue(ran == e.get("ran").getAsBoolean() && r.ran() == ran,
        what + ": handler ran " + ran + " (result.ran " + r.ran() + "), want " + e.get("ran"));
    if (e.has("claim")) {
      Claim c = r.claim();
      assertNotNull(c, what + ": no claim answer, want " + e.get("claim"));
      JsonObject wantClaim = e.getAsJsonObject("claim");
      for (String k : wantClaim.keySet()) {
        String got = switch (k) {
          case "outcome" -> c.outcome().name().replace("OUTCOME_", "");
          case "reason" -> c.reason().name().replace("REASON_", "");
          case "state" -> c.state().name().replace("EVENT_STATE_", "");
          default -> Long.toString(c.fencingToken());
        };
        assertEquals(wantClaim.get(k).getAsString(), got, what + ": claim " + k);
      }
    }
    if (e.has("record")) {
      Record rec = plain.get(NS, "stripe", run.evt);
      JsonObject wantRec = e.getAsJsonObject("record");
      for (String k : wantRec.keySet()) {
        switch (k) {
          case "state" -> assertEquals(wantRec.get(k).getAsString(), rec.getState().name().replace("EVENT_STATE_", ""), what + ": record state");
          case "released" -> assertEquals(wantRec.get(k).getAsBoolean(), rec.getReleased(), what + ": record released");
          case "fencing_token" -> assertEquals(wantRec.get(k).getAsLong(), rec.getFencingToken(), what + ": record fencing_token");
          default -> {
            byte[] stored = body(wantRec.get(k), "result");
            assertArrayEquals(stored, rec.getResult().toByteArray(),
                what + ": stored result " + show(rec.getResult().toByteArray()) + ", want " + show(stored));
          }
        }
      }
    }
    if (e.has("effect")) {
      checkEffect(run, what, r, e.getAsJsonObject("effect"));
    }
  }

  /** checkEffect compares the handler's database after a delivery with expect.effect. */
  static void checkEffect(Run run, String what, GuardResult r, JsonObject want) throws SQLException {
    String key = r.claim() != null ? r.claim().key() : run.other.key();
    if (want.has("done")) {
      assertEquals(want.get("done").getAsBoolean(), run.effectDone != null && run.effectDone, what + ": effect done");
    }
    if (want.has("ledger_rows")) {
      assertEquals(want.get("ledger_rows").getAsInt(), ledgerRows(run.db, key), what + ": ledger rows");
    }
    if (want.has("fence")) {
      try (PreparedStatement st = run.db.prepareStatement(
          "SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?")) {
        st.setString(1, NS);
        st.setString(2, "stripe");
        st.setString(3, key);
        try (ResultSet rs = st.executeQuery()) {
          if (want.get("fence").isJsonNull()) {
            assertFalse(rs.next(), what + ": a fence row, want none");
            return;
          }
          assertTrue(rs.next(), what + ": no fence row, want " + want.get("fence"));
          JsonObject f = want.getAsJsonObject("fence");
          assertEquals(f.get("fencing_token").getAsLong(), rs.getLong(1), what + ": fence fencing_token");
          byte[] stored = rs.getBytes(2);
          byte[] wantResult = body(f.get("result"), "fence.result");
          assertArrayEquals(wantResult, stored,
              what + ": fence result " + (stored == null ? "NULL" : show(stored)) + ", want " + show(wantResult));
        }
      }
    }
  }

  @TestFactory
  Stream<DynamicTest> scenarios() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonElement el : spec.getAsJsonArray("scenarios")) {
      JsonObject sc = el.getAsJsonObject();
      String name = sc.get("name").getAsString();
      if (sc.has("effect") && sc.get("effect").getAsBoolean()) {
        for (String dialect : DIALECTS) {
          tests.add(DynamicTest.dynamicTest(name + " [" + dialect + "]", () -> {
            try (Connection db = database(dialect).open()) {
              runScenario(sc, db);
            }
          }));
        }
      } else {
        tests.add(DynamicTest.dynamicTest(name, () -> runScenario(sc, null)));
      }
    }
    return tests.stream();
  }

  static void runScenario(JsonObject sc, Connection db) throws Exception {
    // A scenario pending for Java (guardspec README, pending) is reported skipped, with why.
    if (sc.has("pending") && sc.getAsJsonObject("pending").has("java")) {
      Assumptions.abort("pending for Java: " + sc.getAsJsonObject("pending").get("java").getAsString());
    }
    Run run = new Run();
    run.db = db;
    Faults faults = new Faults(run.calls);
    String target = sc.has("unreachable") && sc.get("unreachable").getAsBoolean() ? closedPort() : server.target();
    // The guard's client keeps the default retry policy: the contract's.
    try (ClaimdClient client = ClaimdClient.builder(target).interceptor(faults).logger(Quiet.LOGGER).build()) {
      if (sc.has("arrange")) {
        for (JsonElement step : sc.getAsJsonArray("arrange")) {
          arrange(run, step.getAsJsonObject());
        }
      }
      JsonArray deliveries = sc.getAsJsonArray("deliveries");
      for (int i = 0; i < deliveries.size(); i++) {
        JsonObject d = deliveries.get(i).getAsJsonObject();
        ClaimRequest input = claimInput(run, d.has("request") ? d.getAsJsonObject("request") : new JsonObject());
        List<JsonObject> active = new ArrayList<>();
        if (d.has("faults")) {
          d.getAsJsonArray("faults").forEach(f -> active.add(f.getAsJsonObject()));
        }
        run.calls.clear();
        run.effectDone = null;
        faults.active = active;
        int before = run.runs;
        JsonObject h = d.has("handler") ? d.getAsJsonObject("handler") : null;
        GuardResult r;
        try {
          r = client.guard(input, ctx -> behave(run, input, h, ctx));
        } finally {
          faults.active = List.of();
        }
        check(run, "delivery " + (i + 1), r, run.runs > before, d.getAsJsonObject("expect"));
      }
      assertEquals(sc.get("handler_runs").getAsInt(), run.runs, "handler runs");
    }
  }
}
