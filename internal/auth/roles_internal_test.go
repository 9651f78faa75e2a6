package auth

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestMethodTable: every RPC of the generated descriptors has a role, and
// the namespaced ones are exactly those whose request carries a namespace.
// A new RPC fails here until someone decides who may call it.
func TestMethodTable(t *testing.T) {
	rules := methodRules()
	for _, sd := range services {
		for _, m := range sd.Methods {
			if _, ok := rules["/"+sd.ServiceName+"/"+m.MethodName]; !ok {
				t.Errorf("%s.%s has no role in methodRoles, so every principal is refused it", sd.ServiceName, m.MethodName)
			}
		}
		for _, s := range sd.Streams {
			if _, ok := rules["/"+sd.ServiceName+"/"+s.StreamName]; !ok {
				t.Errorf("%s.%s (stream) has no role in methodRoles", sd.ServiceName, s.StreamName)
			}
		}
	}
	c, p := "/"+pb.ClaimService_ServiceDesc.ServiceName+"/", "/"+pb.ProviderService_ServiceDesc.ServiceName+"/"
	e := "/" + pb.EntityService_ServiceDesc.ServiceName + "/"
	i := "/" + pb.InspectService_ServiceDesc.ServiceName + "/"
	want := map[string]rule{
		c + "Claim":         {name: "Claim", role: RoleClaim, namespaced: true},
		c + "Transition":    {name: "Transition", role: RoleClaim, namespaced: true},
		c + "Renew":         {name: "Renew", role: RoleClaim, namespaced: true},
		c + "Release":       {name: "Release", role: RoleClaim, namespaced: true},
		c + "Get":           {name: "Get", role: RoleRead, namespaced: true},
		p + "ListProviders": {name: "ListProviders", role: RoleRead},
		p + "GetProvider":   {name: "GetProvider", role: RoleRead},
		e + "ListDeferred":  {name: "ListDeferred", role: RoleRead, namespaced: true},
		e + "GetEntity":     {name: "GetEntity", role: RoleRead, namespaced: true},
		i + "ListClaims":    {name: "ListClaims", role: RoleRead, namespaced: true},
		i + "ListAudit":     {name: "ListAudit", role: RoleRead, namespaced: true},
	}
	if diff := cmp.Diff(want, rules, cmp.AllowUnexported(rule{})); diff != "" {
		t.Errorf("methodRules() (-want +got):\n%s", diff)
	}
	if !hasNamespace("idempotency.v1.NoSuchService.Nope") {
		t.Error("hasNamespace(unknown method) = false, want true (fail closed)")
	}
}

func TestRolesHas(t *testing.T) {
	tests := []struct {
		desc  string
		have  Roles
		need  Roles
		allow bool
	}{
		{"claim has claim", RoleClaim, RoleClaim, true},
		{"claim lacks read", RoleClaim, RoleRead, false},
		{"read lacks claim", RoleRead, RoleClaim, false},
		{"admin has claim", RoleAdmin, RoleClaim, true},
		{"admin has read", RoleAdmin, RoleRead, true},
		{"none lacks read", 0, RoleRead, false},
		{"admin has metrics", RoleAdmin, RoleMetrics, true},
		{"metrics lacks claim", RoleMetrics, RoleClaim, false},
		{"metrics lacks read", RoleMetrics, RoleRead, false},
		{"read lacks metrics", RoleRead | RoleClaim, RoleMetrics, false},
	}
	for _, tc := range tests {
		if got := tc.have.Has(tc.need); got != tc.allow {
			t.Errorf("%s: Roles(%s).Has(%s) = %v, want %v", tc.desc, tc.have, tc.need, got, tc.allow)
		}
	}
}
