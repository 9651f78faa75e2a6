package dev.claimd.client;

import com.google.protobuf.Message;
import dev.claimd.idempotency.v1.ClaimRequest;
import dev.claimd.idempotency.v1.ClaimResponse;
import dev.claimd.idempotency.v1.GetEntityRequest;
import dev.claimd.idempotency.v1.GetEntityResponse;
import dev.claimd.idempotency.v1.GetProviderRequest;
import dev.claimd.idempotency.v1.GetProviderResponse;
import dev.claimd.idempotency.v1.GetRequest;
import dev.claimd.idempotency.v1.GetResponse;
import dev.claimd.idempotency.v1.ListAuditRequest;
import dev.claimd.idempotency.v1.ListAuditResponse;
import dev.claimd.idempotency.v1.ListClaimsRequest;
import dev.claimd.idempotency.v1.ListClaimsResponse;
import dev.claimd.idempotency.v1.ListDeferredRequest;
import dev.claimd.idempotency.v1.ListDeferredResponse;
import dev.claimd.idempotency.v1.ListProvidersRequest;
import dev.claimd.idempotency.v1.ListProvidersResponse;
import dev.claimd.idempotency.v1.ReleaseRequest;
import dev.claimd.idempotency.v1.ReleaseResponse;
import dev.claimd.idempotency.v1.RenewRequest;
import dev.claimd.idempotency.v1.RenewResponse;
import dev.claimd.idempotency.v1.TransitionRequest;
import dev.claimd.idempotency.v1.TransitionResponse;
import io.grpc.MethodDescriptor;
import io.grpc.protobuf.ProtoUtils;
import java.util.List;

/**
 * ClaimdMethods are the gRPC methods of claimd's four services, for calls the
 * typed client does not wrap ({@code io.grpc.stub.ClientCalls} with a channel,
 * or a server in tests).
 *
 * <p>They are declared here rather than generated because protoc-gen-grpc-java's
 * native binary is not available where claimd is built; the request and
 * response classes are generated (src/generated/java), and a test checks every
 * method below against the services of the generated file descriptors, so the
 * two cannot drift apart.
 */
public final class ClaimdMethods {
  private ClaimdMethods() {}

  /** CLAIM_SERVICE is the full name of the service of Claim, Transition, Renew, Release and Get. */
  public static final String CLAIM_SERVICE = "idempotency.v1.ClaimService";
  /** PROVIDER_SERVICE is the full name of the service of ListProviders and GetProvider. */
  public static final String PROVIDER_SERVICE = "idempotency.v1.ProviderService";
  /** ENTITY_SERVICE is the full name of the service of ListDeferred and GetEntity. */
  public static final String ENTITY_SERVICE = "idempotency.v1.EntityService";
  /** INSPECT_SERVICE is the full name of the service of ListClaims and ListAudit. */
  public static final String INSPECT_SERVICE = "idempotency.v1.InspectService";

  /** CLAIM is ClaimService/Claim. */
  public static final MethodDescriptor<ClaimRequest, ClaimResponse> CLAIM =
      unary(CLAIM_SERVICE, "Claim", ClaimRequest.getDefaultInstance(), ClaimResponse.getDefaultInstance());
  /** TRANSITION is ClaimService/Transition. */
  public static final MethodDescriptor<TransitionRequest, TransitionResponse> TRANSITION =
      unary(CLAIM_SERVICE, "Transition", TransitionRequest.getDefaultInstance(), TransitionResponse.getDefaultInstance());
  /** RENEW is ClaimService/Renew. */
  public static final MethodDescriptor<RenewRequest, RenewResponse> RENEW =
      unary(CLAIM_SERVICE, "Renew", RenewRequest.getDefaultInstance(), RenewResponse.getDefaultInstance());
  /** RELEASE is ClaimService/Release. */
  public static final MethodDescriptor<ReleaseRequest, ReleaseResponse> RELEASE =
      unary(CLAIM_SERVICE, "Release", ReleaseRequest.getDefaultInstance(), ReleaseResponse.getDefaultInstance());
  /** GET is ClaimService/Get. */
  public static final MethodDescriptor<GetRequest, GetResponse> GET =
      unary(CLAIM_SERVICE, "Get", GetRequest.getDefaultInstance(), GetResponse.getDefaultInstance());
  /** LIST_PROVIDERS is ProviderService/ListProviders. */
  public static final MethodDescriptor<ListProvidersRequest, ListProvidersResponse> LIST_PROVIDERS =
      unary(PROVIDER_SERVICE, "ListProviders", ListProvidersRequest.getDefaultInstance(), ListProvidersResponse.getDefaultInstance());
  /** GET_PROVIDER is ProviderService/GetProvider. */
  public static final MethodDescriptor<GetProviderRequest, GetProviderResponse> GET_PROVIDER =
      unary(PROVIDER_SERVICE, "GetProvider", GetProviderRequest.getDefaultInstance(), GetProviderResponse.getDefaultInstance());
  /** LIST_DEFERRED is EntityService/ListDeferred. */
  public static final MethodDescriptor<ListDeferredRequest, ListDeferredResponse> LIST_DEFERRED =
      unary(ENTITY_SERVICE, "ListDeferred", ListDeferredRequest.getDefaultInstance(), ListDeferredResponse.getDefaultInstance());
  /** GET_ENTITY is EntityService/GetEntity. */
  public static final MethodDescriptor<GetEntityRequest, GetEntityResponse> GET_ENTITY =
      unary(ENTITY_SERVICE, "GetEntity", GetEntityRequest.getDefaultInstance(), GetEntityResponse.getDefaultInstance());

  /** LIST_CLAIMS is InspectService/ListClaims. */
  public static final MethodDescriptor<ListClaimsRequest, ListClaimsResponse> LIST_CLAIMS =
      unary(INSPECT_SERVICE, "ListClaims", ListClaimsRequest.getDefaultInstance(), ListClaimsResponse.getDefaultInstance());
  /** LIST_AUDIT is InspectService/ListAudit. */
  public static final MethodDescriptor<ListAuditRequest, ListAuditResponse> LIST_AUDIT =
      unary(INSPECT_SERVICE, "ListAudit", ListAuditRequest.getDefaultInstance(), ListAuditResponse.getDefaultInstance());

  /** ALL lists every method above. */
  public static final List<MethodDescriptor<?, ?>> ALL =
      List.of(CLAIM, TRANSITION, RENEW, RELEASE, GET, LIST_PROVIDERS, GET_PROVIDER, LIST_DEFERRED, GET_ENTITY,
          LIST_CLAIMS, LIST_AUDIT);

  private static <Q extends Message, R extends Message> MethodDescriptor<Q, R> unary(
      String service, String method, Q request, R response) {
    return MethodDescriptor.<Q, R>newBuilder()
        .setType(MethodDescriptor.MethodType.UNARY)
        .setFullMethodName(MethodDescriptor.generateFullMethodName(service, method))
        .setRequestMarshaller(ProtoUtils.marshaller(request))
        .setResponseMarshaller(ProtoUtils.marshaller(response))
        // Every claimd RPC is safe to repeat (see RetryPolicy); Get and the
        // listings change nothing at all.
        .setIdempotent(true)
        .setSafe(service.equals(CLAIM_SERVICE) ? method.equals("Get") : true)
        .build();
  }
}
