package auth

import (
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Roles is a set of roles.
type Roles uint8

// The roles a principal may hold.
const (
	// RoleClaim may Claim, Transition, Renew and Release.
	RoleClaim Roles = 1 << iota
	// RoleRead may Get records, list providers, read entities and
	// deferred events, and list records and their audit log.
	RoleRead
	// RoleAdmin may call every method, including operator-only ones, and
	// read /metrics.
	RoleAdmin
	// RoleMetrics may read /metrics (every namespace's series, the auth
	// file's principal names, the refusal counters) and call no RPC: the
	// role of a Prometheus scraper.
	RoleMetrics
)

var roleNames = map[string]Roles{"claim": RoleClaim, "read": RoleRead, "admin": RoleAdmin, "metrics": RoleMetrics}

// Has reports whether rs grants what role needs: admin grants everything.
func (rs Roles) Has(role Roles) bool { return rs&(role|RoleAdmin) != 0 }

// String lists the roles as the auth file names them: "claim,read".
func (rs Roles) String() string {
	var out []string
	for _, n := range []string{"claim", "read", "admin", "metrics"} {
		if rs&roleNames[n] != 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// methodRoles is the role each RPC of claimd's services needs. A method of
// a service below that is missing here is refused to everyone (the test
// that walks the descriptors fails first), so a new RPC cannot ship open.
var methodRoles = map[string]map[string]Roles{
	pb.ClaimService_ServiceDesc.ServiceName: {
		"Claim": RoleClaim, "Transition": RoleClaim, "Renew": RoleClaim, "Release": RoleClaim,
		"Get": RoleRead,
	},
	pb.ProviderService_ServiceDesc.ServiceName: {
		"ListProviders": RoleRead, "GetProvider": RoleRead,
	},
	// Entities and their deferred events are read like records: within the
	// request's namespace.
	pb.EntityService_ServiceDesc.ServiceName: {
		"ListDeferred": RoleRead, "GetEntity": RoleRead,
	},
	// The namespace's records and their audit log, read like Get.
	pb.InspectService_ServiceDesc.ServiceName: {
		"ListClaims": RoleRead, "ListAudit": RoleRead,
	},
}

// services are the generated descriptors of the services the table covers.
var services = []*grpc.ServiceDesc{&pb.ClaimService_ServiceDesc, &pb.ProviderService_ServiceDesc, &pb.EntityService_ServiceDesc,
	&pb.InspectService_ServiceDesc}

// rule is what one method requires of its caller.
type rule struct {
	name       string // the method's short name, for messages
	role       Roles
	namespaced bool // the request carries a namespace the caller must hold
}

// methodRules derives the rule of every method of services from the
// generated descriptors: the role from methodRoles, and whether it is
// namespaced from its request message (a field named namespace). Methods
// without a role are left out, so they are refused.
func methodRules() map[string]rule {
	out := map[string]rule{}
	for _, sd := range services {
		names := make([]string, 0, len(sd.Methods)+len(sd.Streams))
		for _, m := range sd.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range sd.Streams {
			names = append(names, s.StreamName)
		}
		for _, name := range names {
			role, ok := methodRoles[sd.ServiceName][name]
			if !ok {
				continue
			}
			out["/"+sd.ServiceName+"/"+name] = rule{name: name, role: role, namespaced: hasNamespace(sd.ServiceName + "." + name)}
		}
	}
	return out
}

// hasNamespace reports whether the request of the named method has a
// namespace field. A method it cannot find is namespaced: asking for a
// namespace the request cannot give refuses the call.
func hasNamespace(method string) bool {
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(method))
	if err != nil {
		return true
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	return !ok || md.Input().Fields().ByName("namespace") != nil
}

// Method classes outside the table.
const (
	healthPrefix     = "/grpc.health.v1.Health/"
	reflectionPrefix = "/grpc.reflection."
)
