package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// logLines collects a process's log lines and lets a test wait for one:
// the server writes a request's line before it answers, but the pipe's
// reader may not have read it yet.
type logLines struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every new line
}

func newLogLines() *logLines { return &logLines{changed: make(chan struct{})} }

func (l *logLines) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// wait returns the first JSON line for which match is true, waiting up to
// 10s for it to be written.
func (l *logLines) wait(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(10 * time.Second)
	seen := 0
	for {
		l.mu.Lock()
		lines, changed := l.lines[seen:], l.changed
		seen = len(l.lines)
		l.mu.Unlock()
		for _, line := range lines {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && match(rec) {
				return rec
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no log line %s within 10s", what)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// waitHealth watches grpc.health.v1 until the server reports want.
func waitHealth(t *testing.T, conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: pb.ClaimService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("health watch (waiting for %v): %v", want, err)
		}
		if r.Status == want {
			return
		}
	}
}

// TestReadinessFollowsDurableTier: while PostgreSQL is down /readyz fails
// (and gRPC health says NOT_SERVING) but /healthz does not, so an outage
// takes replicas out of the load balancer without getting them restarted;
// when PostgreSQL is back, so is readiness.
func TestReadinessFollowsDurableTier(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, postgres.Migrate)
	p := start(t, "--postgres-url", pg.URL(), "--data-dir", t.TempDir(), "--ready-interval", "100ms")
	conn := p.conn(t)
	waitServing(t, conn)
	base := "http://" + p.http
	for path, want := range map[string]int{"/readyz": 200, "/healthz": 200} {
		if code, _ := get(t, base+path); code != want {
			t.Errorf("PostgreSQL up: GET %s = %d, want %d", path, code, want)
		}
	}

	pg.Stop(t)
	waitHealth(t, conn, healthpb.HealthCheckResponse_NOT_SERVING)
	for path, want := range map[string]int{"/readyz": 503, "/healthz": 200} {
		if code, _ := get(t, base+path); code != want {
			t.Errorf("PostgreSQL down: GET %s = %d, want %d", path, code, want)
		}
	}

	pg.Start(t)
	waitHealth(t, conn, healthpb.HealthCheckResponse_SERVING)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("PostgreSQL back: GET /readyz = %d, want 200", code)
	}
	p.stop(t)
}

// TestMetricsEndpointAndRequestLogs: /metrics serves claimd's metrics, the
// gRPC server metrics and the Go runtime's; every request writes one JSON
// line at info with the fields an investigation needs, and no payload.
func TestMetricsEndpointAndRequestLogs(t *testing.T) {
	p := start(t, "--data-dir", t.TempDir(), "--log-format", "json")
	conn := p.conn(t)
	waitServing(t, conn)
	serving := p.logs.wait(t, `"claimd serving"`, func(r map[string]any) bool { return r["msg"] == "claimd serving" })
	if serving["tracing"] != "off" {
		t.Errorf(`"claimd serving" tracing = %v, want off (no OTEL_TRACES_EXPORTER)`, serving["tracing"])
	}
	if serving["durability"] != "full" {
		t.Errorf(`"claimd serving" durability = %v, want full (the embedded default)`, serving["durability"])
	}

	claims := pb.NewClaimServiceClient(conn)
	ctx := context.Background()
	const payload, result = "PAYLOAD-SECRET-4242", "RESULT-SECRET-4343"
	c, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
		Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id":"evt_logged","card":"` + payload + `"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		req := &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: c.Key, FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: to}
		if to == pb.EventState_EVENT_STATE_SETTLED {
			req.Result = []byte(result)
		}
		if _, err := claims.Transition(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	line := p.logs.wait(t, "for the Claim", func(r map[string]any) bool { return r["msg"] == "Claim" })
	want := map[string]any{
		"level": "INFO", "namespace": "billing", "provider": "stripe", "key": "evt_logged",
		"key_source": "BODY_FIELD", "outcome": "ACQUIRED", "reason": "NEW", "served_by": "DURABLE",
		"state": "RECEIVED", "state_transition": "→RECEIVED", "fencing_token": float64(1),
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("Claim log line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if _, ok := line["latency_ms"].(float64); !ok {
		t.Errorf("Claim log line latency_ms = %v, want a number", line["latency_ms"])
	}
	settled := p.logs.wait(t, "for the settling Transition", func(r map[string]any) bool {
		return r["msg"] == "Transition" && r["state_transition"] == "→SETTLED"
	})
	if settled["fencing_token"] != float64(1) || settled["changed"] != true || settled["level"] != "INFO" {
		t.Errorf("Transition log line = %v, want fencing_token 1, changed, at INFO", settled)
	}
	for _, l := range p.logs.all() {
		for _, secret := range []string{payload, result, base64.StdEncoding.EncodeToString([]byte(result))} {
			if strings.Contains(l, secret) {
				t.Errorf("a log line carries payload bytes (%s): %s", secret, l)
			}
		}
	}

	code, body := get(t, "http://"+p.http+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		`claimd_claims_total{key_source="BODY_FIELD",namespace="billing",outcome="ACQUIRED",provider="stripe",reason="NEW",served_by="DURABLE"} 1`,
		`claimd_transitions_total{to="SETTLED"} 1`,
		`claimd_provider_ttl_seconds{provider="stripe"} 302400`,
		`claimd_tiers_info{durable="sqlite",fast="memory"} 1`,
		`claimd_sqlite_durability{mode="full"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Transition",grpc_service="idempotency.v1.ClaimService",grpc_type="unary"} 2`,
		"# HELP claimd_fast_tier_false_negatives_total ",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "evt_logged") {
		t.Error("/metrics carries a key")
	}
	p.stop(t)
}

// seedSQLite writes, straight into an embedded data directory, one claim
// whose window ended two hours ago and one within its window, and an
// entity with one applied event and a deferral whose windows ended two
// hours ago too (their claims at the expired one's time).
func seedSQLite(t *testing.T, dataDir string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(dataDir, "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for key, at := range map[string]time.Time{"evt_expired": now.Add(-86 * time.Hour), "evt_live": now.Add(-time.Hour)} {
		if _, err := s.Claim(ctx, tiers.ClaimParams{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: key},
			Now: at, Lease: time.Minute, TTL: 84 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	at := now.Add(-86 * time.Hour)
	secretHash := make([]byte, tiers.SecretHashBytes)
	entityClaim := func(key, entityID string, ev tiers.EntityEvent) tiers.ClaimResult {
		ev.Lifecycle, ev.EntityID, ev.Initial = "payment_intent", entityID, "created"
		res, err := s.Claim(ctx, tiers.ClaimParams{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: key},
			Now: at, Lease: time.Minute, TTL: 84 * time.Hour, Entity: &ev, Start: true, SecretHash: secretHash})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	applied := entityClaim("evt_applied", "pi_1", tiers.EntityEvent{EventType: "payment_intent.processing", From: []string{"created"}, To: "processing"})
	if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: applied.Record.Key, Now: at, Token: applied.Record.Token,
		SecretHash: secretHash, To: tiers.StateSettled, Result: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	early := entityClaim("evt_early", "pi_2", tiers.EntityEvent{EventType: "charge.refunded", From: []string{"succeeded"},
		Wait: []string{"created", "processing"}, To: "refunded"})
	if applied.Outcome != tiers.OutcomeAcquired || early.Outcome != tiers.OutcomeDeferred {
		t.Fatalf("seeded entity claims = %v, %v; want ACQUIRED, DEFERRED", applied.Outcome, early.Outcome)
	}
}

func TestPruneCommand(t *testing.T) {
	dataDir := t.TempDir()
	seedSQLite(t, dataDir)
	claimsLine := regexp.MustCompile(`claims (would delete|deleted): (\d+)`)
	tests := []struct {
		desc string
		args []string
		want string
		// every kind of row but claims: entities, their applied events,
		// deferrals, as the dry run counts them
		entities, deferrals string
	}{
		{"dry run counts and deletes nothing", []string{"--dry-run"}, "would delete: 2",
			"entities would delete: 1, with 1 applied events", "deferrals would delete: 1"},
		{"a grace longer than the time since its window ended keeps it", []string{"--dry-run", "--grace", "72h"}, "would delete: 0",
			"entities would delete: 0, with 0 applied events", "deferrals would delete: 0"},
		{"dry run again: still there", []string{"--dry-run"}, "would delete: 2",
			"entities would delete: 1, with 1 applied events", "deferrals would delete: 1"},
		{"a pass deletes the expired claims and entity rows", nil, "deleted: 2",
			"entities deleted: 1, with 1 applied events", "deferrals deleted: 1"},
		{"nothing left", nil, "deleted: 0", "entities deleted: 0, with 0 applied events", "deferrals deleted: 0"},
	}
	for _, tc := range tests {
		out, code := run(t, append([]string{"prune", "--data-dir", dataDir}, tc.args...)...)
		m := claimsLine.FindStringSubmatch(out)
		if code != 0 || m == nil || !strings.HasSuffix(m[0], tc.want) ||
			!strings.Contains(out, tc.entities+" (") || !strings.Contains(out, tc.deferrals+" (") {
			t.Errorf("%s: claimd prune %v = exit %d\n%s\nwant %q, %q, %q", tc.desc, tc.args, code, out, tc.want, tc.entities, tc.deferrals)
		}
		if !strings.Contains(out, "audit rows") {
			t.Errorf("%s: claimd prune %v reports no audit rows:\n%s", tc.desc, tc.args, out)
		}
	}
	s, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(dataDir, "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(context.Background(), tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_live"}); err != nil {
		t.Errorf("after claimd prune: Get(evt_live) = %v, want the live claim kept", err)
	}
	if _, code := run(t, "prune", "--data-dir", dataDir, "--batch", "0"); code != 2 {
		t.Errorf("claimd prune --batch 0 exit = %d, want 2", code)
	}
}

// TestPruneCommandPostgres: on PostgreSQL a manual pass reports the audit
// partitions, and stands aside while a replica's janitor holds the lock.
func TestPruneCommandPostgres(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	out, code := run(t, "prune", "--postgres-url", url, "--dry-run")
	if code != 0 || !strings.Contains(out, "claims would delete: 0") || !strings.Contains(out, "entities would delete: 0, with 0 applied events") ||
		!strings.Contains(out, "deferrals would delete: 0") || !strings.Contains(out, "audit partitions would drop: 0") {
		t.Errorf("claimd prune --dry-run (postgres) = exit %d\n%s", code, out)
	}
	s, err := postgres.New(context.Background(), postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release, ok, err := s.TryJanitorLock(context.Background())
	if err != nil || !ok {
		t.Fatalf("TryJanitorLock() = %v, %v", ok, err)
	}
	out, code = run(t, "prune", "--postgres-url", url)
	release()
	if code != 0 || !strings.Contains(out, "skipped: another replica's janitor holds the lock") {
		t.Errorf("claimd prune while the janitor lock is held = exit %d\n%s\nwant skipped", code, out)
	}
	out, code = run(t, "prune", "--postgres-url", url)
	if code != 0 || !strings.Contains(out, "claims deleted: 0") {
		t.Errorf("claimd prune (postgres) = exit %d\n%s", code, out)
	}
}
