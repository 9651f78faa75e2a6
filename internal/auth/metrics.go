package auth

import (
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Reasons of the ErrorInfo of a refused call (domain ErrorDomain), and the
// values of claimd_auth_denied_total's reason label. Clients branch on
// these, not on messages. They are the names of the proto's ErrorReason.
var (
	ReasonCredentialsMissing = pb.ErrorReason_CREDENTIALS_MISSING.String() // no token and no verified client certificate
	ReasonTokenMalformed     = pb.ErrorReason_TOKEN_MALFORMED.String()     // the authorization header is not one "Bearer <token>"
	ReasonTokenUnknown       = pb.ErrorReason_TOKEN_UNKNOWN.String()       // no principal lists the token's hash
	ReasonIdentityUnknown    = pb.ErrorReason_IDENTITY_UNKNOWN.String()    // no principal lists the certificate's identities
	ReasonPrincipalConflict  = pb.ErrorReason_PRINCIPAL_CONFLICT.String()  // token and certificate name different principals
	ReasonRoleDenied         = pb.ErrorReason_ROLE_DENIED.String()         // the principal lacks the method's role
	ReasonNamespaceDenied    = pb.ErrorReason_NAMESPACE_DENIED.String()    // the principal may not use the request's namespace
	ReasonMethodDenied       = pb.ErrorReason_METHOD_DENIED.String()       // the method is in no role's table
	ReasonRateLimited        = pb.ErrorReason_RATE_LIMITED.String()        // the principal's token bucket is empty (RESOURCE_EXHAUSTED)
)

// ErrorDomain is the ErrorInfo domain of every error claimd returns. It is
// declared here, the lowest package that answers errors; internal/service
// and internal/gateway use it.
const ErrorDomain = "claimd.dev"

var deniedReasons = []string{
	ReasonCredentialsMissing, ReasonTokenMalformed, ReasonTokenUnknown, ReasonIdentityUnknown,
	ReasonPrincipalConflict, ReasonRoleDenied, ReasonNamespaceDenied, ReasonMethodDenied,
}

// authMetrics are the auth package's collectors. No label carries a token,
// a key or a namespace: reasons are the constants above and principals are
// the auth file's names.
type authMetrics struct {
	denied      *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	lastOK      prometheus.Gauge
	principals  prometheus.Gauge
}

func newAuthMetrics() *authMetrics {
	m := &authMetrics{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_auth_denied_total",
			Help: "Calls refused by authentication (UNAUTHENTICATED) or authorization (PERMISSION_DENIED), by ErrorInfo reason. Nothing was written for any of them.",
		}, []string{"reason"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_auth_rate_limited_total",
			Help: "Calls refused with RESOURCE_EXHAUSTED because the principal's token bucket (auth file: rate, default_rate) was empty, by principal.",
		}, []string{"principal"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_auth_reloads_total",
			Help: "Reloads of the auth file (SIGHUP or a change on disk), by result: success, or failure (the previous file stays in force).",
		}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_auth_last_reload_successful",
			Help: "1 when the last load of the auth file succeeded, 0 when the file on disk is broken and an older one is in force.",
		}),
		principals: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_auth_principals",
			Help: "Principals of the auth file in force.",
		}),
	}
	for _, r := range deniedReasons {
		m.denied.WithLabelValues(r)
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m
}

func (m *authMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.denied, m.rateLimited, m.reloads, m.lastOK, m.principals} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// loaded records a file put in force (at start or by a reload), and
// creates its principals' series at zero so the first refusal shows in
// rate().
func (m *authMetrics) loaded(st *state) {
	m.lastOK.Set(1)
	m.principals.Set(float64(len(st.principals)))
	for _, p := range st.principals {
		m.rateLimited.WithLabelValues(p.cfg.Name)
	}
}

// reloadDone counts a successful reload.
func (m *authMetrics) reloadDone() { m.reloads.WithLabelValues("success").Inc() }

func (m *authMetrics) reloadFailed() {
	m.reloads.WithLabelValues("failure").Inc()
	m.lastOK.Set(0)
}
