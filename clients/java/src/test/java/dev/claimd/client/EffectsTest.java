package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.claimd.client.testing.TestDatabases;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.CancellationException;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The effect fence itself, without claimd (the guard's use of it is in
 * GuardSpecTest and GuardTest), on each dialect: a SQLite file and the real
 * PostgreSQL of $CLAIMD_TEST_POSTGRES_URL (failing without it).
 */
class EffectsTest {
  static final String NS = "java-effects-test";
  static final Map<String, String> DATABASES = new ConcurrentHashMap<>();

  /** db is the dialect's database for this class, made once: fresh, with the ledger table. */
  static synchronized String db(String dialect) throws Exception {
    String url = DATABASES.get(dialect);
    if (url == null) {
      url = dialect.equals("sqlite")
          ? "sqlite:" + Files.createTempDirectory("claimd-java-effects-").resolve("effects.db")
          : TestDatabases.freshPostgres("java_effects");
      try (Connection c = TestDatabases.open(url); Statement st = c.createStatement()) {
        st.execute("CREATE TABLE ledger (key TEXT NOT NULL, writer TEXT NOT NULL)");
      }
      DATABASES.put(dialect, url);
    }
    return url;
  }

  static Lease lease(String key, long token) {
    return new Lease(NS, "stripe", key, token, ByteString.copyFrom(new byte[16]));
  }

  static String key() {
    return "evt_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8));
  }

  static void write(Connection c, String key, String writer) throws SQLException {
    try (PreparedStatement st = c.prepareStatement("INSERT INTO ledger (key, writer) VALUES (?, ?)")) {
      st.setString(1, key);
      st.setString(2, writer);
      st.executeUpdate();
    }
  }

  static int count(Connection c, String sql, String key) throws SQLException {
    try (PreparedStatement st = c.prepareStatement(sql)) {
      st.setString(1, key);
      try (ResultSet rs = st.executeQuery()) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  static int ledger(Connection c, String key) throws SQLException {
    return count(c, "SELECT count(*) FROM ledger WHERE key = ?", key);
  }

  static int fences(Connection c, String key) throws SQLException {
    return count(c, "SELECT count(*) FROM claimd_effects WHERE key = ?", key);
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @ParameterizedTest
  @ValueSource(strings = {"sqlite", "postgres"})
  void theFirstHolderWritesAndALaterOneFindsItDone(String dialect) throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db(dialect))) {
      Effect first = Effects.run(c, lease(key, 1), () -> false, fx -> {
        write(c, key, "first");
        fx.setResult(Map.of("row", 1));
      });
      assertFalse(first.done(), "the first effect is not done");
      assertArrayEquals(utf8("{\"row\":1}"), first.result());
      assertEquals(1, first.fencingToken());
      assertTrue(c.getAutoCommit(), "auto-commit is restored");

      AtomicInteger called = new AtomicInteger();
      Effect later = Effects.run(c, lease(key, 2), () -> false, fx -> {
        called.incrementAndGet();
        write(c, key, "later");
      });
      assertTrue(later.done(), "a later holder finds the fence committed");
      assertEquals(0, called.get(), "the work of a done effect is not called");
      assertArrayEquals(utf8("{\"row\":1}"), later.result(), "the stored result");
      assertEquals(1, later.fencingToken(), "the token of the holder that committed");
      assertThrows(IllegalStateException.class, () -> later.setResult("other"));
      assertEquals(1, ledger(c, key));
      assertEquals(1, fences(c, key));
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"sqlite", "postgres"})
  void aFailureRollsBackTheWritesAndTheFence(String dialect) throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db(dialect))) {
      Exception boom = new Exception("ledger unavailable");
      Exception got = assertThrows(Exception.class, () -> Effects.run(c, lease(key, 1), () -> false, fx -> {
        write(c, key, "first");
        fx.setResult("never stored");
        throw boom;
      }));
      assertSame(boom, got, "the work's exception propagates as it is");
      assertTrue(c.getAutoCommit(), "auto-commit is restored after a failure");
      assertEquals(0, ledger(c, key), "the writes rolled back");
      assertEquals(0, fences(c, key), "the fence rolled back");

      Effect retry = Effects.run(c, lease(key, 2), () -> false, fx -> write(c, key, "retry"));
      assertFalse(retry.done(), "the retry owns the fence");
      assertNull(retry.result(), "no result was set");
      assertEquals(1, ledger(c, key));
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"sqlite", "postgres"})
  void aHolderThatLostTheClaimRollsBackInsteadOfCommitting(String dialect) throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db(dialect))) {
      AtomicInteger asked = new AtomicInteger();
      // Not cancelled when the effect begins; cancelled by the time it would commit.
      assertThrows(CancellationException.class,
          () -> Effects.run(c, lease(key, 1), () -> asked.incrementAndGet() > 1, fx -> write(c, key, "zombie")));
      assertEquals(2, asked.get(), "asked before the transaction and before the commit");
      assertEquals(0, ledger(c, key));
      assertEquals(0, fences(c, key));
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"sqlite", "postgres"})
  void concurrentHoldersWriteOnce(String dialect) throws Exception {
    String key = key();
    String url = db(dialect);
    int holders = 6;
    CyclicBarrier start = new CyclicBarrier(holders);
    ExecutorService pool = Executors.newFixedThreadPool(holders);
    try {
      List<Future<Effect>> results = new ArrayList<>();
      for (int i = 1; i <= holders; i++) {
        long token = i;
        results.add(pool.submit(() -> {
          try (Connection c = TestDatabases.open(url)) {
            start.await();
            return Effects.run(c, lease(key, token), () -> false, fx -> {
              write(c, key, "holder " + token);
              fx.setResult("by " + token);
            });
          }
        }));
      }
      int notDone = 0;
      long winner = -1;
      List<Effect> effects = new ArrayList<>();
      for (Future<Effect> f : results) {
        Effect e = f.get();
        effects.add(e);
        if (!e.done()) {
          notDone++;
          winner = e.fencingToken();
        }
      }
      assertEquals(1, notDone, "exactly one holder commits: " + effects);
      for (Effect e : effects) {
        assertArrayEquals(utf8("by " + winner), e.result(), "every holder ends with the winner's result: " + e);
      }
      try (Connection c = TestDatabases.open(url)) {
        assertEquals(1, ledger(c, key));
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"sqlite", "postgres"})
  void pruneDeletesTheFencesCreatedBeforeTheCutoff(String dialect) throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db(dialect))) {
      Effects.run(c, lease(key, 1), () -> false, fx -> fx.setResult("kept for now"));
      assertEquals(0, Effects.prune(c, Instant.now().minus(1, ChronoUnit.HOURS)), "nothing is an hour old");
      assertEquals(1, fences(c, key));
      assertTrue(Effects.prune(c, Instant.now().plus(1, ChronoUnit.MINUTES)) >= 1, "a cutoff past every fence");
      assertEquals(0, fences(c, key));
    }
  }

  @org.junit.jupiter.api.Test
  void sqliteOutsideAutoCommitIsRefusedBeforeAnyWrite() throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db("sqlite"))) {
      c.setAutoCommit(false);
      AtomicInteger called = new AtomicInteger();
      assertThrows(IllegalStateException.class,
          () -> Effects.run(c, lease(key, 1), () -> false, fx -> called.incrementAndGet()));
      assertEquals(0, called.get());
      c.rollback();
      c.setAutoCommit(true);
      assertEquals(0, fences(c, key));
    }
  }

  @org.junit.jupiter.api.Test
  void postgresInsideTheCallersTransactionCommitsItWithTheFence() throws Exception {
    String key = key();
    try (Connection c = TestDatabases.open(db("postgres"))) {
      c.setAutoCommit(false);
      write(c, key, "before the effect");
      Effect fx = Effects.run(c, lease(key, 1), () -> false, e -> write(c, key, "in the effect"));
      assertFalse(fx.done());
      assertFalse(c.getAutoCommit(), "the caller's auto-commit setting is kept");
      c.rollback(); // nothing left to roll back: the effect committed
      c.setAutoCommit(true);
      assertEquals(2, ledger(c, key), "the caller's pending write joined the effect's transaction");
      assertEquals(1, fences(c, key));
    }
  }
}
