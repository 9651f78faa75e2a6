package dev.claimd.examples;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The receiver's defaults fit beside `make run`, as the README says. */
class DefaultsTest {
  /** CLAIMD_DEFAULTS are the addresses `make run` serves on: gRPC and HTTP. */
  static final List<String> CLAIMD_DEFAULTS = List.of("127.0.0.1:50051", "127.0.0.1:8080");

  @Test
  void listensBesideClaimdAndAsDocumented() throws Exception {
    assertFalse(CLAIMD_DEFAULTS.contains(Receiver.DEFAULT_LISTEN),
        () -> "--listen defaults to " + Receiver.DEFAULT_LISTEN + ", which make run holds");
    String readme = Files.readString(Path.of("README.md"));
    assertTrue(readme.contains("--listen " + Receiver.DEFAULT_LISTEN), "README's command does not pass the default --listen");
    assertTrue(readme.contains("http://" + Receiver.DEFAULT_LISTEN + "/webhooks/stripe"), "README's curl does not use the default address");
  }
}
