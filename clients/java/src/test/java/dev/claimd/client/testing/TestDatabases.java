package dev.claimd.client.testing;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HexFormat;
import java.util.Properties;

/**
 * TestDatabases opens the handlers' databases of the effect tests: a SQLite
 * file, or the real PostgreSQL that test.sh starts with
 * internal/testenv/cmd/testpg and names in $CLAIMD_TEST_POSTGRES_URL. A test
 * that needs PostgreSQL and finds no URL fails: it never skips.
 */
public final class TestDatabases {
  private TestDatabases() {}

  /** POSTGRES_ENV names the variable that holds testpg's URL. */
  public static final String POSTGRES_ENV = "CLAIMD_TEST_POSTGRES_URL";

  /**
   * postgresUrl is $CLAIMD_TEST_POSTGRES_URL ({@code postgres://user@host:port/db?sslmode=disable}).
   *
   * @throws IllegalStateException when it is not set
   */
  public static String postgresUrl() {
    String url = System.getenv(POSTGRES_ENV);
    if (url == null || url.isEmpty()) {
      throw new IllegalStateException(POSTGRES_ENV + " is not set: clients/java/test.sh starts a PostgreSQL with "
          + "internal/testenv/cmd/testpg and sets it; the effect tests need a real one");
    }
    return url;
  }

  /**
   * jdbc turns a database named as effectspec names it ({@code sqlite:PATH} or
   * a {@code postgres://} / {@code postgresql://} URL) into a JDBC URL and its
   * properties (the user, the password, and SQLite's busy timeout, so that
   * writers queue instead of failing).
   */
  public static Properties jdbc(String db, StringBuilder url) {
    Properties p = new Properties();
    if (db.startsWith("sqlite:")) {
      url.append("jdbc:sqlite:").append(db.substring("sqlite:".length()));
      p.setProperty("busy_timeout", "30000");
      return p;
    }
    URI u = URI.create(db);
    if (!"postgres".equals(u.getScheme()) && !"postgresql".equals(u.getScheme())) {
      throw new IllegalArgumentException("want sqlite:PATH or postgres://…, got " + db);
    }
    url.append("jdbc:postgresql://").append(u.getHost()).append(':').append(u.getPort() < 0 ? 5432 : u.getPort())
        .append(u.getRawPath() == null || u.getRawPath().isEmpty() ? "/" : u.getRawPath());
    if (u.getRawQuery() != null) {
      url.append('?').append(u.getRawQuery());
    }
    String info = u.getRawUserInfo();
    if (info != null) {
      int colon = info.indexOf(':');
      p.setProperty("user", decode(colon < 0 ? info : info.substring(0, colon)));
      if (colon >= 0) {
        p.setProperty("password", decode(info.substring(colon + 1)));
      }
    }
    return p;
  }

  /** open connects to db (see {@link #jdbc}). */
  public static Connection open(String db) throws SQLException {
    StringBuilder url = new StringBuilder();
    Properties p = jdbc(db, url);
    return DriverManager.getConnection(url.toString(), p);
  }

  /**
   * freshPostgres creates a new, empty database on $CLAIMD_TEST_POSTGRES_URL's
   * server and returns its URL in the same form: each caller starts with no
   * claimd_effects table, whatever ran before.
   */
  public static String freshPostgres(String prefix) throws SQLException {
    String base = postgresUrl();
    String name = prefix + "_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(4));
    try (Connection c = open(base); Statement st = c.createStatement()) {
      st.execute("CREATE DATABASE " + name);
    }
    URI u = URI.create(base);
    return u.getScheme() + "://" + (u.getRawUserInfo() == null ? "" : u.getRawUserInfo() + "@") + u.getHost()
        + (u.getPort() < 0 ? "" : ":" + u.getPort()) + "/" + name + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery());
  }

  private static String decode(String s) {
    return URLDecoder.decode(s, StandardCharsets.UTF_8);
  }
}
