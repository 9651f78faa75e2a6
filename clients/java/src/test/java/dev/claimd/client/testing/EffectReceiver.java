package dev.claimd.client.testing;

import com.google.gson.Gson;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.claimd.client.ClaimdClient;
import dev.claimd.client.Effect;
import dev.claimd.client.GuardResult;
import dev.claimd.idempotency.v1.ClaimRequest;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;

/**
 * EffectReceiver is the Java receiver that internal/testenv/cmd/effectspec
 * drives through crashes and zombies (clients/guardspec/README.md, "Effect
 * processes", which states the protocol this class speaks):
 *
 * <pre>
 * java -cp TEST-CLASSPATH dev.claimd.client.testing.EffectReceiver --claimd ADDR --namespace NS --db sqlite:PATH|postgres://…
 * </pre>
 *
 * <p>It reads one JSON object a line on standard input ({@code deliver} and
 * {@code go}), guards each delivery of provider stripe by event id on a thread
 * of its own with the Java guard, writes its ledger row through the guard's
 * effect (writer: its PID; result {@code {"event":"<id>"}}), and writes one
 * JSON object a line on standard output: the ready line, gate lines and
 * answers, each in one write. Anything else goes to standard error. It exits
 * when standard input closes, after answering the deliveries under way.
 *
 * <p>{@code --unfenced} writes the ledger row on a connection of its own, outside
 * the effect's transaction: a receiver that is wrong on purpose, so that
 * test.sh can show effectspec failing it (PostgreSQL only: on SQLite that write
 * would queue behind the effect's own write lock).
 */
public final class EffectReceiver {
  private static final Gson GSON = new Gson();

  private final ClaimdClient client;
  private final String namespace;
  private final String db;
  private final boolean unfenced;
  private final String pid = Long.toString(ProcessHandle.current().pid());
  private final OutputStream out;
  private final Map<String, CountDownLatch> gates = new ConcurrentHashMap<>();

  private EffectReceiver(ClaimdClient client, String namespace, String db, boolean unfenced, OutputStream out) {
    this.client = client;
    this.namespace = namespace;
    this.db = db;
    this.unfenced = unfenced;
    this.out = out;
  }

  /** main runs the receiver until standard input closes. */
  public static void main(String[] args) throws Exception {
    // Standard output is the protocol's: whatever else prints goes to stderr.
    OutputStream protocol = new FileOutputStream(FileDescriptor.out);
    System.setOut(new PrintStream(new FileOutputStream(FileDescriptor.err), true, StandardCharsets.UTF_8));
    String address = null;
    String namespace = null;
    String db = null;
    boolean unfenced = false;
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--unfenced")) {
        unfenced = true;
        continue;
      }
      if (i + 1 >= args.length) {
        usage("flag " + args[i] + " needs a value");
      }
      switch (args[i]) {
        case "--claimd" -> address = args[++i];
        case "--namespace" -> namespace = args[++i];
        case "--db" -> db = args[++i];
        default -> usage("unknown flag " + args[i]);
      }
    }
    if (address == null || namespace == null || db == null) {
      usage("--claimd, --namespace and --db are required");
    }
    int code;
    try (ClaimdClient client = ClaimdClient.builder(address).holder("java-receiver-" + ProcessHandle.current().pid()).build()) {
      code = new EffectReceiver(client, namespace, db, unfenced, protocol).serve();
    }
    System.exit(code);
  }

  private static void usage(String why) {
    System.err.println("EffectReceiver: " + why
        + "\nusage: EffectReceiver [--unfenced] --claimd HOST:PORT --namespace NS --db sqlite:PATH|postgres://URL");
    System.exit(2);
  }

  /** serve reads standard input until it closes and returns the exit status. */
  private int serve() throws IOException, InterruptedException {
    Map<String, Object> ready = new LinkedHashMap<>();
    ready.put("ready", true);
    ready.put("pid", ProcessHandle.current().pid());
    write(ready);
    List<Thread> deliveries = new ArrayList<>();
    int code = 0;
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      if (line.isBlank()) {
        continue;
      }
      JsonObject m;
      try {
        JsonElement e = JsonParser.parseString(line);
        m = e.isJsonObject() ? e.getAsJsonObject() : null;
      } catch (RuntimeException e) {
        m = null;
      }
      if (m != null && m.has("go")) {
        gate(m.get("go").getAsString()).countDown();
      } else if (m != null && m.has("deliver")) {
        JsonObject d = m;
        String id = d.get("deliver").getAsString();
        // The gate exists before the delivery runs: a go may come first.
        String at = d.has("gate") ? d.get("gate").getAsString() : null;
        if (at != null) {
          gate(id);
        }
        Thread t = new Thread(() -> deliver(id, d, at), "deliver-" + id);
        deliveries.add(t);
        t.start();
      } else {
        System.err.println("EffectReceiver: not a protocol line: " + line);
        code = 1;
      }
    }
    for (Thread t : deliveries) {
      t.join();
    }
    return code;
  }

  private CountDownLatch gate(String id) {
    return gates.computeIfAbsent(id, k -> new CountDownLatch(1));
  }

  /** deliver guards one delivery and writes its answer. */
  private void deliver(String id, JsonObject d, String at) {
    ClaimRequest.Builder req = ClaimRequest.newBuilder().setNamespace(namespace).setProvider("stripe").setEventId(id);
    if (d.has("lease_ms") && d.get("lease_ms").getAsLong() > 0) {
      req.setLease(ClaimdClient.protoDuration(Duration.ofMillis(d.get("lease_ms").getAsLong())));
    }
    if (d.has("wait_ms") && d.get("wait_ms").getAsLong() > 0) {
      req.setWait(ClaimdClient.protoDuration(Duration.ofMillis(d.get("wait_ms").getAsLong())));
    }
    boolean raise = d.has("raise") && d.get("raise").getAsBoolean();
    boolean[] done = {false};
    GuardResult r;
    try (Connection conn = TestDatabases.open(db); Connection outside = unfenced ? TestDatabases.open(db) : null) {
      Connection ledger = unfenced ? outside : conn;
      r = client.guard(req.build(), ctx -> {
        stop(id, at, "before_effect");
        Effect fx = ctx.effect(conn, f -> {
          try (PreparedStatement st = ledger.prepareStatement(
              "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES (?, ?, ?)")) {
            st.setString(1, namespace);
            st.setString(2, ctx.lease().key());
            st.setString(3, pid);
            st.executeUpdate();
          }
          JsonObject result = new JsonObject();
          result.addProperty("event", id);
          f.setResult(result);
          stop(id, at, "in_effect");
          if (raise) {
            throw new Exception("effectspec asked this delivery to raise inside its effect");
          }
        });
        done[0] = fx.done();
        stop(id, at, "after_commit");
        return fx.result();
      });
    } catch (Exception e) {
      // The database could not be opened: the guard never ran.
      System.err.println("EffectReceiver: " + id + ": " + e);
      Map<String, Object> a = new LinkedHashMap<>();
      a.put("event", id);
      a.put("status", 500);
      a.put("body", "receiver: " + e.getMessage());
      a.put("done", false);
      write(a);
      return;
    }
    if (r.error() != null && r.status() >= 400) {
      System.err.println("EffectReceiver: " + id + ": " + r.status() + " " + r.disposition() + ": " + r.error());
    }
    Map<String, Object> a = new LinkedHashMap<>();
    a.put("event", id);
    a.put("status", r.status());
    a.put("body", new String(r.body(), StandardCharsets.UTF_8));
    a.put("done", done[0]);
    write(a);
  }

  /** stop waits at point when it is the delivery's gate: it says so, then waits for the go. */
  private void stop(String id, String gate, String point) throws InterruptedException {
    if (!point.equals(gate)) {
      return;
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("event", id);
    m.put("at", point);
    write(m);
    gate(id).await();
  }

  /** write writes one line in one write, so that concurrent deliveries' lines never interleave. */
  private void write(Map<String, Object> m) {
    byte[] b = (GSON.toJson(m) + "\n").getBytes(StandardCharsets.UTF_8);
    synchronized (out) {
      try {
        out.write(b);
        out.flush();
      } catch (IOException e) {
        System.err.println("EffectReceiver: writing standard output: " + e);
      }
    }
  }
}
