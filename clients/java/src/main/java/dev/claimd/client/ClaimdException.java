package dev.claimd.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.claimd.idempotency.v1.ErrorReason;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * ClaimdException is a failed call to claimd, after the client's own retries.
 * Its subclasses name what the caller does next; they are chosen by the
 * google.rpc.ErrorInfo reason claimd sent (domain {@value #ERROR_DOMAIN}), then by
 * the gRPC code, never by the message. Catch the subclass, or compare {@link
 * #reason()} with the generated {@link ErrorReason}.
 */
public class ClaimdException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** ERROR_DOMAIN is the ErrorInfo domain of claimd's errors. */
  public static final String ERROR_DOMAIN = "claimd.dev";

  private final String op;
  private final Status.Code code;
  private final String reasonName;
  private final transient Map<String, String> metadata;
  private final int attempts;
  private final Duration retryDelay;
  private List<String> fields = List.of();

  ClaimdException(String op, Status.Code code, String reasonName, Map<String, String> metadata, String message,
      int attempts, Duration retryDelay, Throwable cause) {
    super("claimd: " + op + ": " + code + (reasonName.isEmpty() ? "" : " " + reasonName) + ": " + message, cause);
    this.op = op;
    this.code = code;
    this.reasonName = reasonName;
    this.metadata = Map.copyOf(metadata);
    this.attempts = attempts;
    this.retryDelay = retryDelay;
  }

  /** op is the RPC that failed: "Claim", "Transition", "Renew", "Release", "Get", … */
  public String op() {
    return op;
  }

  /** code is the gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /**
   * reason is the ErrorInfo reason: ERROR_REASON_UNSPECIFIED when claimd sent
   * none (a transport error, for instance), UNRECOGNIZED when it is not one this
   * client knows ({@link #reasonName()} has it).
   */
  public ErrorReason reason() {
    return reasonOf(reasonName);
  }

  /** reasonOf maps an ErrorInfo reason onto the generated enum, whose value names are the reasons. */
  static ErrorReason reasonOf(String name) {
    if (name.isEmpty()) {
      return ErrorReason.ERROR_REASON_UNSPECIFIED;
    }
    for (ErrorReason r : ErrorReason.values()) {
      if (r != ErrorReason.UNRECOGNIZED && r.name().equals(name)) {
        return r;
      }
    }
    return ErrorReason.UNRECOGNIZED;
  }

  /** reasonName is the ErrorInfo reason as sent, empty when none. */
  public String reasonName() {
    return reasonName;
  }

  /** metadata is the ErrorInfo metadata, e.g. current_state for INVALID_TRANSITION. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** attempts is how many times the call was sent. */
  public int attempts() {
    return attempts;
  }

  /**
   * retryDelay is the google.rpc.RetryInfo delay claimd sent with
   * RESOURCE_EXHAUSTED (how long until the rate limit admits a call), zero
   * when none.
   */
  public Duration retryDelay() {
    return retryDelay;
  }

  /**
   * fields are the fields a google.rpc.BadRequest names
   * ("ClaimRequest.lease"), empty when claimd sent none.
   */
  public List<String> fields() {
    return fields;
  }

  /**
   * from turns a failure of a gRPC call into the ClaimdException subclass its
   * reason and code name, with the fields its BadRequest names.
   */
  static ClaimdException from(String op, Throwable t, int attempts) {
    ClaimdException e = classify(op, t, attempts);
    List<String> named = new ArrayList<>();
    com.google.rpc.Status details = StatusProto.fromThrowable(t);
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        if (any.is(BadRequest.class)) {
          try {
            any.unpack(BadRequest.class).getFieldViolationsList().forEach(v -> named.add(v.getField()));
          } catch (InvalidProtocolBufferException ignored) {
            // A detail that does not parse names no field.
          }
        }
      }
    }
    e.fields = List.copyOf(named);
    return e;
  }

  private static ClaimdException classify(String op, Throwable t, int attempts) {
    Status st = Status.fromThrowable(t);
    String reason = "";
    Map<String, String> metadata = Map.of();
    Duration delay = Duration.ZERO;
    com.google.rpc.Status details = StatusProto.fromThrowable(t);
    if (details != null) {
      for (Any any : details.getDetailsList()) {
        try {
          if (any.is(ErrorInfo.class)) {
            ErrorInfo info = any.unpack(ErrorInfo.class);
            if (ERROR_DOMAIN.equals(info.getDomain())) {
              reason = info.getReason();
              metadata = info.getMetadataMap();
            }
          } else if (any.is(RetryInfo.class)) {
            com.google.protobuf.Duration d = any.unpack(RetryInfo.class).getRetryDelay();
            delay = Duration.ofSeconds(d.getSeconds(), d.getNanos());
            if (delay.isNegative()) {
              delay = Duration.ZERO;
            }
          }
        } catch (InvalidProtocolBufferException ignored) {
          // A detail that does not parse says nothing the code does not.
        }
      }
    }
    String msg = st.getDescription() == null ? "" : st.getDescription();
    Status.Code code = st.getCode();
    // The reason decides before the code: STALE_TOKEN is ABORTED from this
    // claimd but FAILED_PRECONDITION from older ones.
    switch (reasonOf(reason)) {
      case STALE_TOKEN:
        return new StaleToken(op, code, reason, metadata, msg, attempts, delay, t);
      case NOT_OWNER:
        return new NotOwner(op, code, reason, metadata, msg, attempts, delay, t);
      case INVALID_TRANSITION:
        return new InvalidTransition(op, code, reason, metadata, msg, attempts, delay, t);
      case RESULT_MISMATCH:
        return new ResultMismatch(op, code, reason, metadata, msg, attempts, delay, t);
      case PROVIDER_NOT_FOUND:
        return new ProviderNotFound(op, code, reason, metadata, msg, attempts, delay, t);
      default:
        break;
    }
    switch (code) {
      case NOT_FOUND:
        return new NotFound(op, code, reason, metadata, msg, attempts, delay, t);
      case INVALID_ARGUMENT:
        return new InvalidArgument(op, code, reason, metadata, msg, attempts, delay, t);
      case UNAVAILABLE:
      case DEADLINE_EXCEEDED:
        return new Unavailable(op, code, reason, metadata, msg, attempts, delay, t);
      case UNAUTHENTICATED:
        return new Unauthenticated(op, code, reason, metadata, msg, attempts, delay, t);
      case PERMISSION_DENIED:
        return new PermissionDenied(op, code, reason, metadata, msg, attempts, delay, t);
      case RESOURCE_EXHAUSTED:
        return new RateLimited(op, code, reason, metadata, msg, attempts, delay, t);
      default:
        return new ClaimdException(op, code, reason, metadata, msg, attempts, delay, t);
    }
  }

  /** StaleToken: a newer holder took the key over, or it was released; stop working on it (STALE_TOKEN). */
  public static final class StaleToken extends ClaimdException {
    private static final long serialVersionUID = 1L;

    StaleToken(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /**
   * PermissionDenied: the caller's principal may not use the namespace or call
   * the method (PERMISSION_DENIED; {@link #reason()} says which). Nothing was
   * written.
   */
  public static class PermissionDenied extends ClaimdException {
    private static final long serialVersionUID = 1L;

    PermissionDenied(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /**
   * NotOwner: the fencing token is the current one but the lease secret is not
   * its owner's (NOT_OWNER). Only the Lease of an ACQUIRED claim writes a record.
   */
  public static final class NotOwner extends PermissionDenied {
    private static final long serialVersionUID = 1L;

    NotOwner(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /**
   * InvalidTransition: the state machine does not allow the move, e.g. the
   * record is SETTLED or FAILED already; {@code metadata().get("current_state")}
   * says where it is.
   */
  public static final class InvalidTransition extends ClaimdException {
    private static final long serialVersionUID = 1L;

    InvalidTransition(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /** ResultMismatch: SETTLED or FAILED repeated with another result; the stored one stands. */
  public static final class ResultMismatch extends ClaimdException {
    private static final long serialVersionUID = 1L;

    ResultMismatch(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /** NotFound: no record (or entity, or lifecycle) of that name. */
  public static final class NotFound extends ClaimdException {
    private static final long serialVersionUID = 1L;

    NotFound(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /** ProviderNotFound: the provider is not registered on the server. */
  public static final class ProviderNotFound extends ClaimdException {
    private static final long serialVersionUID = 1L;

    ProviderNotFound(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /** InvalidArgument: claimd rejected a field of the request; nothing was written. */
  public static final class InvalidArgument extends ClaimdException {
    private static final long serialVersionUID = 1L;

    InvalidArgument(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /**
   * Unavailable: claimd did not answer in time (unreachable, its durable tier is
   * down, or the deadline passed). Claims fail closed with it: a provider's
   * retry later is always safe.
   */
  public static final class Unavailable extends ClaimdException {
    private static final long serialVersionUID = 1L;

    Unavailable(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /** Unauthenticated: the credentials were missing or not recognised; retrying changes nothing. */
  public static final class Unauthenticated extends ClaimdException {
    private static final long serialVersionUID = 1L;

    Unauthenticated(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }

  /**
   * RateLimited: the caller's principal is over its rate limit, still after the
   * retries the policy allowed; {@link #retryDelay()} says when claimd admits a
   * call again. Nothing was written.
   */
  public static final class RateLimited extends ClaimdException {
    private static final long serialVersionUID = 1L;

    RateLimited(String op, Status.Code c, String r, Map<String, String> m, String msg, int n, Duration d, Throwable t) {
      super(op, c, r, m, msg, n, d, t);
    }
  }
}
