package dev.claimd.client.testing;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
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
  private final String target;
  private final String http;
  private final ArrayDeque<String> tail;

  private TestClaimd(Process process, Path dataDir, String target, String http, ArrayDeque<String> tail) {
    this.tail = tail;
    this.process = process;
    this.dataDir = dataDir;
    this.target = target;
    this.http = http;
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
    synchronized (tail) {
      return new ArrayList<>(tail);
    }
  }

  /** start starts claimd with extra serve flags and waits until it serves. */
  public static TestClaimd start(String... args) throws IOException, InterruptedException {
    Path dataDir = Files.createTempDirectory("claimd-java-test-");
    List<String> cmd = new ArrayList<>(List.of(binary().toString(), "serve", "--listen", "127.0.0.1:0",
        "--http-listen", "127.0.0.1:0", "--data-dir", dataDir.toString()));
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    CompletableFuture<String[]> addrs = new CompletableFuture<>();
    ArrayDeque<String> tail = new ArrayDeque<>();
    Thread reader = new Thread(() -> {
      // Read stderr for the process's whole life: claimd logs a line per
      // request, and a full pipe would block it.
      try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = r.readLine()) != null; ) {
          synchronized (tail) {
            tail.addLast(line);
            if (tail.size() > 200) {
              tail.removeFirst();
            }
          }
          if (!addrs.isDone() && line.startsWith("{")) {
            try {
              JsonObject rec = JsonParser.parseString(line).getAsJsonObject();
              if (rec.has("msg") && rec.get("msg").getAsString().equals("claimd serving")) {
                addrs.complete(new String[] {rec.get("grpc").getAsString(), rec.get("http").getAsString()});
              }
            } catch (RuntimeException notJson) {
              // kept in the tail only
            }
          }
        }
      } catch (IOException ignored) {
        // the process ended
      }
      synchronized (tail) {
        addrs.completeExceptionally(new IllegalStateException("claimd exited before serving:\n" + String.join("\n", tail)));
      }
    }, "claimd-stderr");
    reader.setDaemon(true);
    reader.start();
    try {
      String[] a = addrs.get(20, TimeUnit.SECONDS);
      TestClaimd c = new TestClaimd(p, dataDir, a[0], a[1], tail);
      c.awaitServing();
      return c;
    } catch (ExecutionException | TimeoutException | RuntimeException e) {
      p.destroyForcibly().waitFor();
      deleteTree(dataDir);
      throw new IllegalStateException("claimd did not start: " + e.getMessage(), e);
    }
  }

  /** awaitServing polls the gRPC health check (an observable condition) until SERVING, for at most 20 s. */
  private void awaitServing() throws InterruptedException {
    ManagedChannel ch = Grpc.newChannelBuilder(target, InsecureChannelCredentials.create()).build();
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

  /** stop sends SIGTERM, waits for the exit, removes the data directory and returns the exit code. */
  public int stop() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(20, TimeUnit.SECONDS)) {
      process.destroyForcibly().waitFor();
    }
    deleteTree(dataDir);
    return process.exitValue();
  }

  @Override
  public void close() throws InterruptedException {
    stop();
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

  private static void deleteTree(Path dir) {
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
