package dev.claimd.client;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Collections;
import java.util.HexFormat;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;

/**
 * Effects is the effect fence over plain {@code java.sql} (clients/GUARD.md,
 * "Exactly-once effects"): the table {@code claimd_effects} in the handler's own
 * database, one row per delivery, committed in one transaction with the
 * handler's writes. A handler opens it with {@link Guard.GuardContext#effect};
 * this class holds the DDL, {@link #effectKey} and {@link #prune}.
 *
 * <p>Dialects: PostgreSQL and SQLite, told apart by the connection's {@code
 * getDatabaseProductName()}. The library brings no driver: use your own
 * (pgjdbc, sqlite-jdbc).
 */
public final class Effects {
  private Effects() {}

  /** TABLE is the fence's table. */
  public static final String TABLE = "claimd_effects";

  /** POSTGRES_SCHEMA is the fence's DDL for PostgreSQL, byte for byte what {@code claimd effects-schema --dialect postgres} prints. */
  public static final String POSTGRES_SCHEMA = "CREATE TABLE IF NOT EXISTS claimd_effects (\n"
      + "    namespace     text        NOT NULL,\n"
      + "    provider      text        NOT NULL,\n"
      + "    key           text        NOT NULL,\n"
      + "    fencing_token bigint      NOT NULL,\n"
      + "    result        bytea,\n"
      + "    created_at    timestamptz NOT NULL DEFAULT now(),\n"
      + "    PRIMARY KEY (namespace, provider, key)\n"
      + ")";

  /** SQLITE_SCHEMA is the fence's DDL for SQLite, byte for byte what {@code claimd effects-schema --dialect sqlite} prints. */
  public static final String SQLITE_SCHEMA = "CREATE TABLE IF NOT EXISTS claimd_effects (\n"
      + "    namespace     TEXT    NOT NULL,\n"
      + "    provider      TEXT    NOT NULL,\n"
      + "    key           TEXT    NOT NULL,\n"
      + "    fencing_token INTEGER NOT NULL,\n"
      + "    result        BLOB,\n"
      + "    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n"
      + "    PRIMARY KEY (namespace, provider, key)\n"
      + ")";

  static final String INSERT = "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES (?, ?, ?, ?)"
      + " ON CONFLICT (namespace, provider, key) DO NOTHING";
  static final String SELECT = "SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?";
  static final String UPDATE = "UPDATE claimd_effects SET result = ? WHERE namespace = ? AND provider = ? AND key = ?";
  static final String PRUNE = "DELETE FROM claimd_effects WHERE created_at < ?";

  /** SQLite's created_at: UTC with milliseconds, so that text order is time order. */
  private static final DateTimeFormatter SQLITE_TIME =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", Locale.ROOT).withZone(ZoneOffset.UTC);

  /** Dialect is a database the fence speaks. */
  public enum Dialect {
    /** POSTGRES is PostgreSQL (product name "PostgreSQL"). */
    POSTGRES(POSTGRES_SCHEMA),
    /** SQLITE is SQLite (product name "SQLite"). */
    SQLITE(SQLITE_SCHEMA);

    private final String schema;

    Dialect(String schema) {
      this.schema = schema;
    }

    /** schema is the dialect's DDL of claimd_effects. */
    public String schema() {
      return schema;
    }

    /**
     * of tells the connection's dialect by its product name.
     *
     * @throws SQLException for a database the fence does not speak
     */
    public static Dialect of(Connection c) throws SQLException {
      String name = c.getMetaData().getDatabaseProductName();
      if ("PostgreSQL".equalsIgnoreCase(name)) {
        return POSTGRES;
      }
      if ("SQLite".equalsIgnoreCase(name)) {
        return SQLITE;
      }
      throw new SQLException("claimd: the effect fence speaks PostgreSQL and SQLite, not " + name);
    }
  }

  /**
   * effectKey is a stable idempotency key for step of one delivery, for a
   * downstream API's Idempotency-Key: "claimd-" and the first 32 hex digits of
   * the SHA-256 of namespace, provider, key and step joined by NUL bytes
   * (UTF-8). The same across takeovers, replicas and languages; 39 characters.
   */
  public static String effectKey(String namespace, String provider, String key, String step) {
    MessageDigest h;
    try {
      h = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is part of every JDK", e);
    }
    String joined = namespace + '\0' + provider + '\0' + key + '\0' + step;
    byte[] sum = h.digest(joined.getBytes(StandardCharsets.UTF_8));
    return "claimd-" + HexFormat.of().formatHex(sum, 0, 16);
  }

  /**
   * prune deletes the fences created before {@code before} and returns how many.
   * A fence matters while claimd may still hand its delivery to a new holder:
   * take a cutoff older than the longest provider ttl you use, with a margin,
   * from your own clock.
   */
  public static int prune(Connection c, Instant before) throws SQLException {
    Dialect d = Dialect.of(c);
    ensureTable(c, d);
    try (PreparedStatement st = c.prepareStatement(PRUNE)) {
      if (d == Dialect.POSTGRES) {
        st.setObject(1, OffsetDateTime.ofInstant(before, ZoneOffset.UTC));
      } else {
        st.setString(1, SQLITE_TIME.format(before));
      }
      return st.executeUpdate();
    }
  }

  // --- the table, created once per database (or per connection, for an in-memory SQLite) ---

  /** READY holds the databases whose table exists, by dialect, URL and user. */
  private static final Set<String> READY = ConcurrentHashMap.newKeySet();
  /** READY_MEMORY holds the in-memory SQLite connections whose table exists: each is a database of its own. */
  private static final Map<Connection, Boolean> READY_MEMORY = Collections.synchronizedMap(new WeakHashMap<>());

  /** Place names where a connection's table was made: its database, or the connection itself. */
  private record Place(String database, Connection memory) {
    boolean ready() {
      return memory != null ? READY_MEMORY.containsKey(memory) : READY.contains(database);
    }

    void markReady() {
      if (memory != null) {
        READY_MEMORY.put(memory, Boolean.TRUE);
      } else {
        READY.add(database);
      }
    }
  }

  private static Place place(Connection c, Dialect d) throws SQLException {
    DatabaseMetaData md = c.getMetaData();
    String url = md.getURL() == null ? "" : md.getURL();
    if (d == Dialect.SQLITE && (url.equals("jdbc:sqlite:") || url.contains(":memory:") || url.contains("mode=memory"))) {
      return new Place(null, c);
    }
    return new Place(d + " " + url + " " + md.getUserName(), null);
  }

  /**
   * ensureTable creates claimd_effects when this database has not been seen
   * yet. Concurrent CREATE TABLE IF NOT EXISTS in PostgreSQL can fail on the
   * catalog's unique index while another session creates the same table: the
   * table then exists, and one retry proves it. In a transaction the caller
   * already has open, the CREATE runs under a savepoint so that a lost race
   * does not abort that transaction.
   */
  static Place ensureTable(Connection c, Dialect d) throws SQLException {
    Place p = place(c, d);
    if (p.ready()) {
      return p;
    }
    for (int attempt = 1; ; attempt++) {
      Savepoint sp = c.getAutoCommit() ? null : c.setSavepoint();
      try (Statement st = c.createStatement()) {
        st.execute(d.schema());
        if (sp != null) {
          c.releaseSavepoint(sp);
        }
        break;
      } catch (SQLException e) {
        if (sp != null) {
          c.rollback(sp);
        }
        if (attempt >= 2 || d != Dialect.POSTGRES) {
          throw e;
        }
      }
    }
    if (c.getAutoCommit()) {
      p.markReady(); // committed; otherwise it is once the caller's transaction is
    }
    return p;
  }

  // --- one effect -------------------------------------------------------------------

  /**
   * run is one effect, step by step as GUARD.md gives it: a transaction on c
   * (SQLite: BEGIN IMMEDIATE, so that writers queue at the start), the fence's
   * INSERT … ON CONFLICT DO NOTHING; no row inserted: the fence is committed
   * already, read it, skip the work; else run the work, store its result with
   * the fence, commit. Anything thrown rolls the transaction back (no writes,
   * no fence) and propagates. {@code cancelled} is asked before the
   * transaction and again before its commit: a holder that lost its claim
   * rolls back instead of committing.
   */
  static Effect run(Connection c, Lease lease, BooleanSupplier cancelled, Effect.Work work) throws Exception {
    Dialect d = Dialect.of(c);
    boolean autoCommit = c.getAutoCommit();
    if (d == Dialect.SQLITE && !autoCommit) {
      // The driver keeps a deferred transaction open outside auto-commit, and
      // a deferred writer fails at its first write instead of queueing.
      throw new IllegalStateException("claimd: an effect on SQLite needs a connection in auto-commit mode: "
          + "it begins its own BEGIN IMMEDIATE transaction");
    }
    checkCancelled(cancelled);
    Place place = ensureTable(c, d);
    Throwable failure = null;
    try {
      if (d == Dialect.SQLITE) {
        exec(c, "BEGIN IMMEDIATE");
      } else if (autoCommit) {
        c.setAutoCommit(false);
      }
      Effect fx = fence(c, lease, work);
      checkCancelled(cancelled);
      if (d == Dialect.SQLITE) {
        exec(c, "COMMIT");
      } else {
        c.commit();
      }
      place.markReady();
      return fx;
    } catch (Exception | Error e) {
      failure = e;
      rollback(c, d, e);
      throw e;
    } finally {
      if (d == Dialect.POSTGRES && autoCommit) {
        try {
          c.setAutoCommit(true);
        } catch (SQLException e) {
          if (failure == null) {
            throw e;
          }
          failure.addSuppressed(e);
        }
      }
    }
  }

  /** fence takes the delivery's fence row, or finds it committed, inside the open transaction. */
  private static Effect fence(Connection c, Lease lease, Effect.Work work) throws Exception {
    int inserted;
    try (PreparedStatement st = c.prepareStatement(INSERT)) {
      st.setString(1, lease.namespace());
      st.setString(2, lease.provider());
      st.setString(3, lease.key());
      st.setLong(4, lease.fencingToken());
      inserted = st.executeUpdate();
    }
    if (inserted == 0) {
      try (PreparedStatement st = c.prepareStatement(SELECT)) {
        st.setString(1, lease.namespace());
        st.setString(2, lease.provider());
        st.setString(3, lease.key());
        try (ResultSet rs = st.executeQuery()) {
          if (!rs.next()) {
            throw new SQLException("claimd: the fence of " + lease + " conflicted but cannot be read");
          }
          return new Effect(true, rs.getLong(1), rs.getBytes(2));
        }
      }
    }
    Effect fx = new Effect(false, lease.fencingToken(), null);
    work.run(fx);
    if (fx.resultSet()) {
      try (PreparedStatement st = c.prepareStatement(UPDATE)) {
        st.setBytes(1, fx.rawResult());
        st.setString(2, lease.namespace());
        st.setString(3, lease.provider());
        st.setString(4, lease.key());
        st.executeUpdate();
      }
    }
    return fx;
  }

  private static void checkCancelled(BooleanSupplier cancelled) {
    if (cancelled.getAsBoolean()) {
      throw new CancellationException("claimd: another holder took the key over; the effect was not committed");
    }
  }

  private static void exec(Connection c, String sql) throws SQLException {
    try (Statement st = c.createStatement()) {
      st.execute(sql);
    }
  }

  /** rollback ends a failed effect's transaction; its own failure is kept with the first. */
  private static void rollback(Connection c, Dialect d, Throwable cause) {
    try {
      if (d == Dialect.SQLITE) {
        exec(c, "ROLLBACK");
      } else {
        c.rollback();
      }
    } catch (SQLException e) {
      // SQLite: no transaction is open when BEGIN IMMEDIATE itself failed.
      if (!(d == Dialect.SQLITE && String.valueOf(e.getMessage()).contains("no transaction is active"))) {
        cause.addSuppressed(e);
      }
    }
  }
}
