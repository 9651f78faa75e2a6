package dev.claimd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.claimd.client.testing.TestClaimd;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ErrorReason;
import io.grpc.TlsChannelCredentials;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The client against a claimd that requires TLS, client certificates and
 * credentials: the throwaway CA of internal/testenv (testca), tokens from
 * {@code claimd token new}, an auth file.
 */
class SecureTest {
  static final String NS = "javasec";
  static Path dir;
  static TestClaimd server;
  static Path ca;
  static Path receiverCert;
  static Path receiverKey;
  static Path meshCert;
  static Path meshKey;
  static String token;

  static Path leaf(JsonObject certs, String name, String part) {
    return Path.of(certs.getAsJsonObject("leaves").getAsJsonObject(name).get(part).getAsString());
  }

  @BeforeAll
  static void start() throws Exception {
    dir = Files.createTempDirectory("claimd-java-secure-");
    JsonObject certs = JsonParser.parseString(TestClaimd.run(List.of(TestClaimd.testca().toString(),
        "-dir", dir.resolve("ca").toString(),
        "-leaf", "server=claimd,127.0.0.1,localhost",
        "-leaf", "receiver=spiffe://claimd.test/receiver", // names no principal: a call needs a token too
        "-leaf", "mesh=spiffe://claimd.test/mesh"))).getAsJsonObject();
    ca = Path.of(certs.get("ca").getAsString());
    receiverCert = leaf(certs, "receiver", "cert");
    receiverKey = leaf(certs, "receiver", "key");
    meshCert = leaf(certs, "mesh", "cert");
    meshKey = leaf(certs, "mesh", "key");
    String[] lines = TestClaimd.run(List.of(TestClaimd.binary().toString(), "token", "new")).strip().split("\n");
    token = lines[0];
    String tokensLine = List.of(lines).stream().map(String::strip).filter(l -> l.startsWith("tokens: ")).findFirst().orElseThrow();
    Path auth = dir.resolve("auth.yaml");
    Files.writeString(auth, "version: 1\nprincipals:\n"
        + "  hooks:\n    " + tokensLine + "\n    namespaces: [" + NS + "]\n    roles: [claim, read]\n"
        + "  mesh:\n    identities: [\"spiffe://claimd.test/mesh\"]\n    namespaces: [" + NS + "]\n    roles: [claim]\n",
        StandardCharsets.UTF_8);
    // claimd refuses an auth file other users may read.
    Files.setPosixFilePermissions(auth, PosixFilePermissions.fromString("rw-------"));
    server = TestClaimd.start(
        TlsChannelCredentials.newBuilder().trustManager(ca.toFile()).keyManager(receiverCert.toFile(), receiverKey.toFile()).build(),
        "--tls-cert", leaf(certs, "server", "cert").toString(), "--tls-key", leaf(certs, "server", "key").toString(),
        "--tls-client-ca", ca.toString(), "--auth-file", auth.toString());
  }

  @AfterAll
  static void stop() throws Exception {
    if (server != null) {
      int code = server.stop();
      assertEquals(0, code, () -> "claimd's exit code; its last lines:\n" + String.join("\n", server.logs()));
    }
    if (dir != null) {
      TestClaimd.deleteTree(dir);
    }
  }

  static ClaimRequest request() {
    return ClaimRequest.newBuilder().setNamespace(NS).setProvider("stripe")
        .setEventId("evt_" + HexFormat.of().formatHex(new SecureRandom().generateSeed(8))).build();
  }

  ClaimdClient.Builder tls() {
    return ClaimdClient.builder(server.target()).tlsCa(ca).logger(Quiet.LOGGER);
  }

  @Test
  void aTokenOverTlsGuardsADelivery() {
    try (ClaimdClient c = tls().tlsClientCert(receiverCert, receiverKey).token(token).build()) {
      GuardResult r = c.guard(request(), ctx -> "ok");
      assertEquals(200, r.status(), () -> String.valueOf(r.error()));
      assertTrue(r.ran());
    }
  }

  @Test
  void aClientCertificateNamingAPrincipalNeedsNoToken() {
    try (ClaimdClient c = tls().tlsClientCert(meshCert, meshKey).build()) {
      assertTrue(c.claim(request()).acquired());
    }
  }

  @Test
  void missingOrUnknownCredentialsAreRefusedAndTheGuardAnswers500() {
    try (ClaimdClient c = tls().tlsClientCert(receiverCert, receiverKey).build()) {
      ClaimdException e = assertThrows(ClaimdException.class, () -> c.claim(request()));
      assertInstanceOf(ClaimdException.Unauthenticated.class, e);
      // The certificate names no principal, and no token says who calls.
      assertEquals(ErrorReason.IDENTITY_UNKNOWN, e.reason());
      assertEquals(1, e.attempts(), "a refusal is not retried");
      boolean[] ran = new boolean[1];
      GuardResult r = c.guard(request(), ctx -> ran[0] = true);
      assertEquals(500, r.status());
      assertFalse(ran[0]);
    }
    try (ClaimdClient c = tls().tlsClientCert(receiverCert, receiverKey).token("cl_not-a-token-claimd-knows").build()) {
      ClaimdException e = assertThrows(ClaimdException.Unauthenticated.class, () -> c.claim(request()));
      assertEquals(ErrorReason.TOKEN_UNKNOWN, e.reason());
      assertFalse(e.getMessage().contains("not-a-token-claimd-knows"), "the error quotes the token");
    }
  }

  @Test
  void aNamespaceNotGrantedIsPermissionDenied() {
    try (ClaimdClient c = tls().tlsClientCert(receiverCert, receiverKey).token(token).build()) {
      ClaimdException e = assertThrows(ClaimdException.PermissionDenied.class,
          () -> c.claim(request().toBuilder().setNamespace("someone-else").build()));
      assertEquals(ErrorReason.NAMESPACE_DENIED, e.reason());
    }
  }

  @Test
  void aServerCertificateFromAnotherCaIsUnavailable() throws Exception {
    Path other = dir.resolve("other");
    JsonObject certs = JsonParser.parseString(TestClaimd.run(List.of(TestClaimd.testca().toString(),
        "-dir", other.toString(), "-leaf", "x=x"))).getAsJsonObject();
    try (ClaimdClient c = ClaimdClient.builder(server.target()).tlsCa(Path.of(certs.get("ca").getAsString()))
        .tlsClientCert(receiverCert, receiverKey).token(token).retryPolicy(RetryPolicy.NONE).build()) {
      assertThrows(ClaimdException.Unavailable.class, () -> c.claim(request()));
    }
  }
}
