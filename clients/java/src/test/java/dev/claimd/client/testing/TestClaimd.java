package dev.claimd.client.testing;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * TestClaimd is a real claimd process for tests: {@code claimd serve} with the
 * embedded tiers in a fresh data directory, on free loopback ports, ready once
 * its gRPC health check answers SERVING. The binary is $CLAIMD_BIN (test.sh
 * builds it once), else a {@code go build} of the checkout this client lives in.
 */
public final class TestClaimd implements AutoCloseable {
  private final Process process;
  private final Path dataDir;
  private final Path log;
  private volatile String target;
  private volatile String http;

  private TestClaimd(Process process, Path dataDir, Path log) {
    this.process = process;
    this.dataDir = dataDir;
    this.log = log;
  }

  /** target is the gRPC address, "127.0.0.1:PORT". */
  public String target() {
    return target;
  }

  /** http is the HTTP address (/healthz, /readyz, /metrics). */
  public String http() {
    return http;
  }

  /** logs are the last lines claimd wrote (for failure messages). */
  public List<String> logs() {
    try {
      List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
      return all.subList(Math.max(0, all.size() - 200), all.size());
    } catch (IOException e) {
      return List.of("(no log: " + e + ")");
    }
  }

  /** start starts claimd with extra serve flags and waits until it serves. */
  public static TestClaimd start(String... args) throws IOException, InterruptedException {
    return start(InsecureChannelCredentials.create(), args);
  }

  /**
   * start starts claimd with extra serve flags and waits until it serves; the
   * health check connects with creds (TLS ones for a claimd started with
   * --tls-cert, with a client certificate for --tls-client-ca).
   */
  public static TestClaimd start(ChannelCredentials creds, String... args) throws IOException, InterruptedException {
    Path dataDir = Files.createTempDirectory("claimd-java-test-");
    // claimd's log goes to a file, not a pipe: a pipe nobody reads any more
    // would stop claimd with SIGPIPE at its last log line.
    Path log = dataDir.resolve("claimd.log");
    List<String> cmd = new ArrayList<>(List.of(binary().toString(), "serve", "--listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--data-dir", dataDir.resolve("data").toString()));
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD)
        .redirectError(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
    TestClaimd c = new TestClaimd(p, dataDir, log);
    try {
      // Poll the log (an observable condition) for the line with the addresses.
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      while (c.target == null) {
        for (String line : c.logs()) {
          if (line.startsWith("{")) {
            try {
              JsonObject rec = JsonParser.parseString(line).getAsJsonObject();
              if (rec.has("msg") && rec.get("msg").getAsString().equals("claimd serving")) {
                c.target = rec.get("grpc").getAsString();
                c.http = rec.get("http").getAsString();
              }
            } catch (RuntimeException notJson) {
              // not a log record
            }
          }
        }
        if (c.target == null) {
          if (!p.isAlive()) {
            throw new IllegalStateException("claimd exited " + p.exitValue() + " before serving:\n" + String.join("\n", c.logs()));
          }
          if (System.nanoTime() > deadline) {
            throw new IllegalStateException("claimd logged no addresses within 20s:\n" + String.join("\n", c.logs()));
          }
          Thread.sleep(20);
        }
      }
      c.awaitServing(creds);
      return c;
    } catch (RuntimeException e) {
      p.destroyForcibly().waitFor();
      deleteTree(dataDir);
      throw e;
    }
  }

  /** awaitServing polls the gRPC health check (an observable condition) until SERVING, for at most 20 s. */
  private void awaitServing(ChannelCredentials creds) throws InterruptedException {
    ManagedChannel ch = Grpc.newChannelBuilder(target, creds).build();
    try {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
      for (;;) {
        try {
          HealthCheckResponse r = HealthGrpc.newBlockingStub(ch).withDeadlineAfter(1, TimeUnit.SECONDS)
              .check(HealthCheckRequest.getDefaultInstance());
          if (r.getStatus() == HealthCheckResponse.ServingStatus.SERVING) {
            return;
          }
        } catch (RuntimeException notYet) {
          // not serving yet
        }
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("claimd at " + target + " not SERVING within 20s:\n" + String.join("\n", logs()));
        }
        Thread.sleep(20);
      }
    } finally {
      ch.shutdownNow();
    }
  }

  /**
   * stop sends SIGTERM and waits for the exit; it returns the exit code, and
   * removes the data directory unless claimd failed (its log is kept there).
   */
  public synchronized int stop() throws InterruptedException {
    if (!process.isAlive() && !Files.exists(dataDir)) {
      return process.exitValue(); // stopped before
    }
    process.destroy();
    if (!process.waitFor(20, TimeUnit.SECONDS)) {
      process.destroyForcibly().waitFor();
    }
    int code = process.exitValue();
    if (code == 0) {
      deleteTree(dataDir);
    }
    return code;
  }

  /** close stops claimd (see stop); an interrupt while waiting is kept on the thread. */
  @Override
  public void close() {
    try {
      stop();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** binary is $CLAIMD_BIN, else a go build of ./cmd/claimd of the checkout into target/claimd. */
  public static synchronized Path binary() throws IOException, InterruptedException {
    String env = System.getenv("CLAIMD_BIN");
    if (env != null && !env.isEmpty()) {
      Path p = Path.of(env);
      if (!Files.isExecutable(p)) {
        throw new IllegalStateException("CLAIMD_BIN=" + env + " is not an executable");
      }
      return p;
    }
    Path repo = Path.of("").toAbsolutePath();
    while (repo != null && !Files.exists(repo.resolve("cmd/claimd"))) {
      repo = repo.getParent();
    }
    if (repo == null) {
      throw new IllegalStateException("no CLAIMD_BIN and no claimd checkout above " + Path.of("").toAbsolutePath());
    }
    Path out = Path.of("target", "claimd").toAbsolutePath();
    Process b = new ProcessBuilder("go", "build", "-o", out.toString(), "./cmd/claimd").directory(repo.toFile())
        .inheritIO().start();
    if (b.waitFor() != 0) {
      throw new IllegalStateException("go build of claimd in " + repo + " failed");
    }
    return out;
  }

  /** run runs a helper binary (claimd token new, testca) and returns its stdout; it fails on a non-zero exit. */
  public static String run(List<String> cmd) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      throw new IllegalStateException(String.join(" ", cmd) + " exited " + p.exitValue());
    }
    return out;
  }

  /**
   * testca is $CLAIMD_TESTCA_BIN, else a go build of internal/testenv/cmd/testca
   * (the throwaway CA of every client's TLS tests) into target/testca.
   */
  public static synchronized Path testca() throws IOException, InterruptedException {
    String env = System.getenv("CLAIMD_TESTCA_BIN");
    if (env != null && !env.isEmpty()) {
      return Path.of(env);
    }
    Path repo = Path.of("").toAbsolutePath();
    while (repo != null && !Files.exists(repo.resolve("cmd/claimd"))) {
      repo = repo.getParent();
    }
    if (repo == null) {
      throw new IllegalStateException("no CLAIMD_TESTCA_BIN and no claimd checkout above " + Path.of("").toAbsolutePath());
    }
    Path out = Path.of("target", "testca").toAbsolutePath();
    Process b = new ProcessBuilder("go", "build", "-o", out.toString(), "./internal/testenv/cmd/testca")
        .directory(repo.toFile()).inheritIO().start();
    if (b.waitFor() != 0) {
      throw new IllegalStateException("go build of testca failed");
    }
    return out;
  }

  /** deleteTree removes a directory and everything in it. */
  public static void deleteTree(Path dir) {
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> {
        try {
          Files.deleteIfExists(p);
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      });
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
