package dev.claimd.client;

import com.google.protobuf.ByteString;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.EventState;
import dev.claimd.idempotency.v1.GetProviderRequest;
import dev.claimd.idempotency.v1.GetRequest;
import dev.claimd.idempotency.v1.ListProvidersRequest;
import dev.claimd.idempotency.v1.Provider;
import dev.claimd.idempotency.v1.Record;
import dev.claimd.idempotency.v1.ReleaseRequest;
import dev.claimd.idempotency.v1.RenewRequest;
import dev.claimd.idempotency.v1.TransitionRequest;
import dev.claimd.idempotency.v1.TransitionResponse;
import io.grpc.CallCredentials;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.SecurityLevel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.ClientCalls;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * ClaimdClient calls claimd: typed calls (claim, transition, renew, release,
 * get, providers) under one retry policy, and {@link #guard} for webhook
 * receivers. It is safe for concurrent use; make one per process, share it, and
 * close it at shutdown.
 *
 * <pre>{@code
 * try (ClaimdClient claimd = ClaimdClient.builder("127.0.0.1:50051").build()) {
 *   Claim c = claimd.claim(ClaimRequest.newBuilder()
 *       .setNamespace("billing").setProvider("stripe").setEventId("evt_1").build());
 *   if (c.acquired()) {
 *     claimd.start(c.lease());
 *     // ... the side effect ...
 *     claimd.settle(c.lease(), "ok".getBytes(StandardCharsets.UTF_8));
 *   }
 * }
 * }</pre>
 */
public final class ClaimdClient implements AutoCloseable {
  private static final SecureRandom ATTEMPT_IDS = new SecureRandom();
  private static final int HEARTBEAT_THREADS = 4;

  private final ManagedChannel managed; // null when built on a caller's channel
  private final Channel channel;
  private final CallCredentials credentials; // null without a token
  private final RetryPolicy retry;
  private final String holder;
  private final Clock clock;
  private final Sleeper sleeper;
  private final System.Logger logger;
  private final ScheduledExecutorService heartbeats;
  private final DuplicateCache cache; // null unless Builder.localCache

  private ClaimdClient(Builder b, ManagedChannel managed, Channel channel) {
    this.managed = managed;
    this.channel = b.interceptors.isEmpty() ? channel : ClientInterceptors.intercept(channel, b.interceptors);
    this.credentials = b.token == null ? null : new Bearer(b.token);
    this.retry = b.retry;
    this.holder = b.holder;
    this.clock = b.clock;
    this.sleeper = b.sleeper;
    this.logger = b.logger;
    this.cache = b.localCache > 0 ? new DuplicateCache(b.localCache, b.clock) : null;
    // Renewals block for at most two heartbeat intervals; a few threads keep
    // one slow renewal from delaying the other guards' in flight.
    ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(HEARTBEAT_THREADS, r -> {
      Thread t = new Thread(r, "claimd-heartbeat");
      t.setDaemon(true);
      return t;
    });
    ex.setRemoveOnCancelPolicy(true);
    this.heartbeats = ex;
  }

  /** builder starts a client of claimd at target ("host:port" or any gRPC target). */
  public static Builder builder(String target) {
    return new Builder(Objects.requireNonNull(target, "target"));
  }

  // --- typed calls ------------------------------------------------------------

  /**
   * claim asks whether a delivery is the first and whether the caller may act
   * on it. A request without a holder gets the client's; one without an
   * attempt_id gets 16 fresh random bytes (hex), reused by this call's own
   * retries, so a retried Claim whose first answer was lost gets the same
   * ACQUIRED (token and secret) back instead of IN_PROGRESS from itself.
   *
   * @throws ClaimdException (a subclass naming the error) when claimd refused or
   *     could not be reached
   */
  public Claim claim(ClaimRequest request) {
    ClaimRequest.Builder b = request.toBuilder();
    if (b.getHolder().isEmpty()) {
      b.setHolder(holder);
    }
    if (b.getAttemptId().isEmpty()) {
      b.setAttemptId(newAttemptId());
    }
    ClaimRequest req = b.build();
    Duration wait = req.hasWait() ? duration(req.getWait()) : Duration.ZERO;
    Instant askedAt = clock.instant();
    if (cache != null) {
      ClaimResponse hit = cache.lookup(req);
      if (hit != null) {
        return new Claim(req.getNamespace(), req.getProvider(), hit, null, askedAt, true);
      }
    }
    ClaimResponse resp = call("Claim", ClaimdMethods.CLAIM, req, wait, retry);
    if (cache != null) {
      cache.rememberClaim(req, resp);
    }
    return new Claim(req.getNamespace(), req.getProvider(), resp, req.hasLease() ? duration(req.getLease()) : null, askedAt);
  }

  /**
   * transition moves the event forward, fenced by the lease. {@code result} is
   * stored with SETTLED or FAILED (null: none). Repeating a transition that
   * happened already changes nothing.
   */
  public TransitionResponse transition(Lease lease, EventState to, byte[] result) {
    return transition(lease, to, result, false);
  }

  /**
   * transition moves the event forward as above; {@code effectRecovered} says
   * that a SETTLED result is an earlier holder's, read from its effect fence
   * (clients/GUARD.md, row 23): claimd counts and audits it.
   */
  public TransitionResponse transition(Lease lease, EventState to, byte[] result, boolean effectRecovered) {
    TransitionRequest.Builder b = TransitionRequest.newBuilder()
        .setNamespace(lease.namespace())
        .setProvider(lease.provider())
        .setKey(lease.key())
        .setFencingToken(lease.fencingToken())
        .setLeaseSecret(lease.leaseSecret())
        .setTo(to)
        .setEffectRecovered(effectRecovered);
    if (result != null) {
      b.setResult(ByteString.copyFrom(result));
    }
    TransitionResponse resp = call("Transition", ClaimdMethods.TRANSITION, b.build(), Duration.ZERO, retry);
    if (cache != null) {
      cache.rememberRecord(resp.getRecord());
    }
    return resp;
  }

  /** start moves the event to PROCESSING: the side effect is under way. */
  public TransitionResponse start(Lease lease) {
    return transition(lease, EventState.EVENT_STATE_PROCESSING, null);
  }

  /** settle moves the event to SETTLED with its result (at most 64 KiB), answered to every duplicate. */
  public TransitionResponse settle(Lease lease, byte[] result) {
    return transition(lease, EventState.EVENT_STATE_SETTLED, result);
  }

  /** fail moves the event to FAILED with a text (at most 64 KiB): it will not be retried. */
  public TransitionResponse fail(Lease lease, byte[] text) {
    return transition(lease, EventState.EVENT_STATE_FAILED, text);
  }

  /** renew extends the lease to now + {@code lease} (null: the provider's default). */
  public Record renew(Lease lease, Duration leaseFor) {
    return renew(lease, leaseFor, retry);
  }

  Record renew(Lease lease, Duration leaseFor, RetryPolicy policy) {
    RenewRequest.Builder b = RenewRequest.newBuilder()
        .setNamespace(lease.namespace())
        .setProvider(lease.provider())
        .setKey(lease.key())
        .setFencingToken(lease.fencingToken())
        .setLeaseSecret(lease.leaseSecret());
    if (leaseFor != null) {
      b.setLease(protoDuration(leaseFor));
    }
    return call("Renew", ClaimdMethods.RENEW, b.build(), Duration.ZERO, policy).getRecord();
  }

  /**
   * release gives the key back: the side effect did not happen, and the next
   * claim acquires it with RELEASED.
   */
  public Record release(Lease lease) {
    ReleaseRequest req = ReleaseRequest.newBuilder()
        .setNamespace(lease.namespace())
        .setProvider(lease.provider())
        .setKey(lease.key())
        .setFencingToken(lease.fencingToken())
        .setLeaseSecret(lease.leaseSecret())
        .build();
    return call("Release", ClaimdMethods.RELEASE, req, Duration.ZERO, retry).getRecord();
  }

  /** get reads a record (never its lease secret). */
  public Record get(String namespace, String provider, String key) {
    GetRequest req = GetRequest.newBuilder().setNamespace(namespace).setProvider(provider).setKey(key).build();
    return call("Get", ClaimdMethods.GET, req, Duration.ZERO, retry).getRecord();
  }

  /** listProviders lists the providers claimd knows, groups included. */
  public List<Provider> listProviders() {
    return call("ListProviders", ClaimdMethods.LIST_PROVIDERS, ListProvidersRequest.getDefaultInstance(), Duration.ZERO, retry)
        .getProvidersList();
  }

  /** getProvider reads one provider by name. */
  public Provider getProvider(String name) {
    return call("GetProvider", ClaimdMethods.GET_PROVIDER, GetProviderRequest.newBuilder().setName(name).build(),
        Duration.ZERO, retry).getProvider();
  }

  /**
   * guard runs {@code handler} at most once per delivery, as far as claimd can
   * tell, and says what to answer the provider: see {@link Guard}.
   */
  public GuardResult guard(ClaimRequest request, Guard.Handler handler) {
    return new Guard(this).run(request, handler);
  }

  /** Function is a function guarded by {@link #idempotent}: the side effect, returning its value. */
  @FunctionalInterface
  public interface Function<T> {
    /** call does the work; {@code ctx} is the guard's (claim, cancellation, effect). */
    T call(Guard.GuardContext ctx) throws Exception;
  }

  /**
   * idempotent runs {@code fn} once per delivery of {@code request} and returns
   * its value: the first call runs it under {@link #guard} (heartbeat, fencing,
   * settle) and stores the value through {@code codec}; a duplicate returns the
   * stored value decoded, as a {@code T}, without running it. Exceptions
   * propagate: what {@code fn} throws releases the key (a {@link
   * PermanentException} fails it, and every duplicate throws a
   * PermanentException with its text); a call it did not run for throws {@link
   * NotRunException}; a claimd failure its {@link ClaimdException}. A value the
   * codec cannot encode, or over {@link Guard#MAX_RESULT_BYTES} encoded, throws
   * {@link ResultNotStorableException} before anything is settled: never an
   * empty stored result, and never released (fn ran), so the key waits for its
   * lease. The request's scope keeps two functions guarded by one event id
   * apart; its window asks for a dedup window longer than the provider's.
   */
  public <T> T idempotent(ClaimRequest request, Codec<T> codec, Function<T> fn) throws Exception {
    Objects.requireNonNull(codec, "codec");
    Object[] value = new Object[1];
    GuardResult r = guard(request, ctx -> {
      T v = fn.call(ctx);
      value[0] = v;
      byte[] stored;
      try {
        stored = codec.encode(v);
      } catch (Exception e) {
        throw new ResultNotStorableException("claimd: the result cannot be encoded: " + e.getMessage(), e);
      }
      if (stored == null) {
        stored = new byte[0];
      }
      if (stored.length > Guard.MAX_RESULT_BYTES) {
        throw new ResultNotStorableException(
            "claimd: the result is " + stored.length + " bytes encoded, over " + Guard.MAX_RESULT_BYTES, null);
      }
      return stored;
    });
    Claim cl = r.claim();
    switch (r.disposition()) {
      case DUPLICATE -> {
        if (cl.state() == EventState.EVENT_STATE_FAILED) {
          throw new PermanentException(new String(r.body(), StandardCharsets.UTF_8));
        }
        return codec.decode(r.body());
      }
      case IN_PROGRESS, PAYLOAD_MISMATCH, DEFERRED, SUPERSEDED -> throw new NotRunException(r);
      case SETTLED -> {
        if (r.error() instanceof ClaimdException) {
          // fn ended the event itself with another outcome (GUARD.md row 18):
          // what claimd stored stands, as a duplicate would get it.
          Record rec = get(cl.namespace(), cl.provider(), cl.key());
          if (rec.getState() == EventState.EVENT_STATE_FAILED) {
            throw new PermanentException(rec.getResult().toStringUtf8());
          }
          return codec.decode(rec.getResult().toByteArray());
        }
        byte[] mine = codec.encode(uncheckedCast(value[0]));
        if (!Arrays.equals(mine, r.body())) {
          return codec.decode(r.body()); // an earlier holder's effect committed: its result stands (row 23)
        }
        @SuppressWarnings("unchecked")
        T v = (T) value[0];
        return v;
      }
      default -> {
      }
    }
    Throwable err = r.error();
    if (err instanceof Exception e) {
      throw e;
    }
    if (err instanceof Error e) {
      throw e;
    }
    throw new IllegalStateException("claimd: guard answered " + r.status() + " (" + r.disposition() + ")");
  }

  @SuppressWarnings("unchecked")
  private static <T> T uncheckedCast(Object o) {
    return (T) o;
  }

  /** channel is the channel calls go through (with the client's interceptors), for other RPCs. */
  public Channel channel() {
    return channel;
  }

  /** close closes the channel the builder made and stops the heartbeats. */
  @Override
  public void close() {
    heartbeats.shutdownNow();
    if (managed != null) {
      managed.shutdownNow();
      try {
        managed.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  // --- what the guard uses ----------------------------------------------------

  RetryPolicy retryPolicy() {
    return retry;
  }

  Clock clock() {
    return clock;
  }

  System.Logger logger() {
    return logger;
  }

  ScheduledExecutorService heartbeats() {
    return heartbeats;
  }

  // --- one call under the retry policy ------------------------------------------

  /**
   * call sends req under policy p. Every claimd RPC is safe to repeat, so an
   * attempt that may or may not have reached claimd is simply sent again;
   * {@code extra} widens the per-attempt and total timeouts (a Claim's wait).
   */
  <Q, R> R call(String op, MethodDescriptor<Q, R> method, Q req, Duration extra, RetryPolicy p) {
    long start = System.nanoTime();
    long total = p.totalTimeout().plus(extra).toNanos();
    long perAttempt = p.attemptTimeout().plus(extra).toNanos();
    for (int attempt = 1; ; attempt++) {
      long left = total - (System.nanoTime() - start);
      CallOptions opts = CallOptions.DEFAULT.withDeadlineAfter(Math.max(1, Math.min(perAttempt, left)), TimeUnit.NANOSECONDS);
      if (credentials != null) {
        opts = opts.withCallCredentials(credentials);
      }
      try {
        return ClientCalls.blockingUnaryCall(channel, method, opts, req);
      } catch (StatusRuntimeException e) {
        Status.Code code = e.getStatus().getCode();
        long leftNow = total - (System.nanoTime() - start);
        // A per-attempt timeout while the whole call still has time is the
        // "my call timed out" case that attempt_id exists for.
        boolean retryable = code == Status.Code.UNAVAILABLE || (code == Status.Code.DEADLINE_EXCEEDED && leftNow > 0);
        Duration pause = p.backoff(attempt, () -> ThreadLocalRandom.current().nextDouble());
        if (code == Status.Code.RESOURCE_EXHAUSTED) {
          // A rate limit says when to come back; without a RetryInfo the
          // refusal is something else, and repeating it changes nothing.
          Duration delay = ClaimdException.from(op, e, attempt).retryDelay();
          retryable = !delay.isZero();
          if (delay.compareTo(pause) > 0) {
            pause = delay;
          }
        }
        // A pause that would end past the call's total is not taken: the call
        // fails now, with the last error, rather than at its end.
        if (!retryable || attempt >= p.maxAttempts() || pause.toNanos() >= leftNow) {
          throw ClaimdException.from(op, e, attempt);
        }
        try {
          sleeper.sleep(pause);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw ClaimdException.from(op, Status.CANCELLED.withDescription("interrupted between retries").withCause(ie)
              .asRuntimeException(), attempt);
        }
      }
    }
  }

  static String newAttemptId() {
    byte[] b = new byte[16];
    ATTEMPT_IDS.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  static Duration duration(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }

  /** protoDuration converts a java.time.Duration for a request (Claim's lease and wait, Renew's lease). */
  public static com.google.protobuf.Duration protoDuration(Duration d) {
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  /** Sleeper pauses between retries; tests replace it. */
  @FunctionalInterface
  interface Sleeper {
    void sleep(Duration d) throws InterruptedException;
  }

  /** Bearer sends the token as "authorization: Bearer …", never in plaintext off loopback. */
  private static final class Bearer extends CallCredentials {
    private static final Metadata.Key<String> AUTHORIZATION = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final Supplier<String> token;

    Bearer(Supplier<String> token) {
      this.token = token;
    }

    @Override
    public void applyRequestMetadata(RequestInfo info, Executor executor, MetadataApplier applier) {
      if (info.getSecurityLevel() != SecurityLevel.PRIVACY_AND_INTEGRITY && !isLoopback(info.getAuthority())) {
        applier.fail(Status.UNAUTHENTICATED.withDescription("claimd client: refusing to send a token in plaintext off loopback"));
        return;
      }
      String t;
      try {
        t = token.get();
      } catch (RuntimeException e) {
        applier.fail(Status.UNAUTHENTICATED.withDescription("claimd client: the token supplier failed").withCause(e));
        return;
      }
      Metadata md = new Metadata();
      md.put(AUTHORIZATION, "Bearer " + t);
      applier.apply(md);
    }

    @Override
    public String toString() {
      return "Bearer[redacted]";
    }
  }

  /** isLoopback reports whether a target or authority names a loopback host. */
  static boolean isLoopback(String target) {
    String t = target;
    int scheme = t.indexOf(":///");
    if (scheme >= 0) {
      t = t.substring(scheme + 4);
    } else if (t.startsWith("dns:") || t.startsWith("ipv4:") || t.startsWith("ipv6:")) {
      t = t.substring(t.indexOf(':') + 1);
    }
    String host;
    if (t.startsWith("[")) {
      int end = t.indexOf(']');
      host = end < 0 ? t : t.substring(1, end);
    } else {
      int colon = t.lastIndexOf(':');
      host = colon < 0 || t.indexOf(':') != colon ? t : t.substring(0, colon);
    }
    host = host.toLowerCase(Locale.ROOT);
    return host.equals("localhost") || host.equals("::1") || host.startsWith("127.");
  }

  /** Builder configures a ClaimdClient. */
  public static final class Builder {
    private final String target;
    private Supplier<String> token;
    private boolean tls;
    private Path tlsCa;
    private Path tlsCert;
    private Path tlsKey;
    private String serverName;
    private boolean insecure;
    private RetryPolicy retry = RetryPolicy.DEFAULT;
    private String holder = defaultHolder();
    private final List<ClientInterceptor> interceptors = new ArrayList<>();
    private Consumer<ManagedChannelBuilder<?>> customizer = b -> {};
    private Channel channel;
    private Clock clock = Clock.systemUTC();
    private Sleeper sleeper = d -> TimeUnit.NANOSECONDS.sleep(d.toNanos());
    private System.Logger logger = System.getLogger("dev.claimd.client");
    private int localCache;

    private Builder(String target) {
      this.target = target;
    }

    /**
     * token sends a bearer token ({@code claimd token new}) with every call, only
     * over TLS or to a loopback target.
     */
    public Builder token(String token) {
      Objects.requireNonNull(token, "token");
      // A token read from a file often keeps its newline; claimd would refuse
      // it as malformed on every call. Say so here, without echoing it.
      if (token.isEmpty() || !token.strip().equals(token) || token.chars().anyMatch(Character::isISOControl)) {
        throw new IllegalArgumentException("claimd client: the token is empty or has spaces, a trailing newline or control characters");
      }
      return tokenSupplier(() -> token);
    }

    /** tokenSupplier is asked for the bearer token before every attempt (rotation). */
    public Builder tokenSupplier(Supplier<String> token) {
      this.token = Objects.requireNonNull(token, "token");
      return this;
    }

    /** tls connects over TLS with the JDK's trusted roots. */
    public Builder tls() {
      this.tls = true;
      return this;
    }

    /** tlsCa connects over TLS, trusting the CA certificates in this PEM file. */
    public Builder tlsCa(Path caPem) {
      this.tls = true;
      this.tlsCa = Objects.requireNonNull(caPem, "caPem");
      return this;
    }

    /** tlsClientCert presents this certificate chain and key (PEM, PKCS#8) for mutual TLS. */
    public Builder tlsClientCert(Path certPem, Path keyPem) {
      this.tls = true;
      this.tlsCert = Objects.requireNonNull(certPem, "certPem");
      this.tlsKey = Objects.requireNonNull(keyPem, "keyPem");
      return this;
    }

    /** serverName overrides the name the server's certificate is checked against. */
    public Builder serverName(String name) {
      this.serverName = Objects.requireNonNull(name, "name");
      return this;
    }

    /**
     * insecure allows plaintext to a target that is not a loopback address.
     * Without it such a target needs TLS, and build throws. A token is never sent
     * in plaintext off loopback.
     */
    public Builder insecure() {
      this.insecure = true;
      return this;
    }

    /** retryPolicy replaces {@link RetryPolicy#DEFAULT}. */
    public Builder retryPolicy(RetryPolicy p) {
      this.retry = Objects.requireNonNull(p, "policy");
      return this;
    }

    /** holder is the holder text sent with claims that name none. Default "hostname/pid". */
    public Builder holder(String holder) {
      this.holder = Objects.requireNonNull(holder, "holder");
      return this;
    }

    /** interceptor adds a client interceptor around every attempt (metrics, tests); it never sees the token. */
    public Builder interceptor(ClientInterceptor i) {
      interceptors.add(Objects.requireNonNull(i, "interceptor"));
      return this;
    }

    /** channelBuilder lets the caller adjust the channel builder (keepalive, executors) before build. */
    public Builder channelBuilder(Consumer<ManagedChannelBuilder<?>> customizer) {
      this.customizer = Objects.requireNonNull(customizer, "customizer");
      return this;
    }

    /**
     * channel makes calls on a channel the caller owns (an in-process one in
     * tests) instead of one the builder makes; close then leaves it open.
     */
    public Builder channel(Channel channel) {
      this.channel = Objects.requireNonNull(channel, "channel");
      return this;
    }

    /**
     * localCache keeps up to {@code size} settled answers in the client (least
     * recently used go first) and answers a claim by event id for one of them
     * without asking claimd, until the record's window ends: a provider's
     * retries of a delivery this client settled, or was told is a DUPLICATE.
     * Only SETTLED and FAILED records are kept, never an owned or in-progress
     * key; a claim by delivery, of an entity lifecycle or with another
     * payload_sha256 always asks claimd. {@link Claim#cached()} tells a cached
     * answer. Off by default (0).
     */
    public Builder localCache(int size) {
      this.localCache = Math.max(size, 0);
      return this;
    }

    /**
     * logger is where the guard reports what needs a human: mismatches, unsettled events, and a
     * handler's exception (once, at ERROR, with the lease's key and the stack trace), which the
     * guard answers with a 500 and does not throw.
     */
    public Builder logger(System.Logger logger) {
      this.logger = Objects.requireNonNull(logger, "logger");
      return this;
    }

    Builder clock(Clock clock) {
      this.clock = clock;
      return this;
    }

    Builder sleeper(Sleeper sleeper) {
      this.sleeper = sleeper;
      return this;
    }

    /**
     * build makes the client. Connecting is lazy: the first call connects, and
     * a claimd that cannot be reached fails that call with Unavailable after
     * the retry policy.
     *
     * @throws IllegalArgumentException for plaintext to a non-loopback target
     *     without {@link #insecure()}, or a token with insecure plaintext
     * @throws java.io.UncheckedIOException when a TLS file cannot be read
     */
    public ClaimdClient build() {
      if (channel != null) {
        return new ClaimdClient(this, null, channel);
      }
      boolean loopback = isLoopback(target);
      ChannelCredentials creds;
      if (tls) {
        TlsChannelCredentials.Builder tb = TlsChannelCredentials.newBuilder();
        try {
          if (tlsCa != null) {
            tb.trustManager(tlsCa.toFile());
          }
          if (tlsCert != null) {
            tb.keyManager(tlsCert.toFile(), tlsKey.toFile());
          }
        } catch (IOException e) {
          throw new java.io.UncheckedIOException("claimd client: reading TLS files", e);
        }
        creds = tb.build();
      } else {
        if (!loopback && !insecure) {
          throw new IllegalArgumentException("claimd client: " + target
              + " is not a loopback address: connect with tls() or tlsCa(), or allow plaintext with insecure()");
        }
        if (!loopback && token != null) {
          throw new IllegalArgumentException("claimd client: a token is never sent in plaintext off loopback: use TLS");
        }
        creds = InsecureChannelCredentials.create();
      }
      ManagedChannelBuilder<?> cb = Grpc.newChannelBuilder(target, creds);
      if (serverName != null) {
        cb.overrideAuthority(serverName);
      }
      customizer.accept(cb);
      ManagedChannel ch = cb.build();
      return new ClaimdClient(this, ch, ch);
    }

    private static String defaultHolder() {
      String host;
      try {
        host = InetAddress.getLocalHost().getHostName();
      } catch (IOException e) {
        host = "unknown";
      }
      String h = host + "/" + ProcessHandle.current().pid();
      return h.length() > 255 ? h.substring(0, 255) : h;
    }
  }
}
