package dev.claimd.client;

import com.google.protobuf.ByteString;
import java.util.Objects;

/**
 * Lease is the owner's handle on a claimed record, and what Transition, Renew
 * and Release present: the record's name, its fencing token, and the lease
 * secret that only the ACQUIRED answer carried. The token is a sequence number
 * anyone may read (Get shows it, and downstream systems fence writes by it); the
 * secret proves ownership, so keep a Lease as private as a password while the
 * claim runs. {@link #toString()} leaves the secret out, so a logged Lease does
 * not leak it. Take it from {@link Claim#lease()}.
 *
 * @param namespace the claim's namespace
 * @param provider the claim's provider
 * @param key the canonical key Claim returned (scope included)
 * @param fencingToken the fencing token Claim returned
 * @param leaseSecret the 16-byte lease secret Claim returned
 */
public record Lease(String namespace, String provider, String key, long fencingToken, ByteString leaseSecret) {
  /** Lease checks that no part is missing. */
  public Lease {
    Objects.requireNonNull(namespace, "namespace");
    Objects.requireNonNull(provider, "provider");
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(leaseSecret, "leaseSecret");
  }

  /** toString renders the lease without its secret. */
  @Override
  public String toString() {
    return namespace + "/" + provider + "/" + key + " token " + Long.toUnsignedString(fencingToken);
  }
}
