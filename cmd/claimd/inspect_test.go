package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestInspect runs claimd inspect against claimd as shipped (embedded tiers,
// an auth file) on a key with a whole story: a charge.succeeded event
// claimed by pod-a, whose lease runs out; taken over by pod-b
// (LEASE_EXPIRED), which settles it with a result its effect fence
// recovered; a refund deferred meanwhile. Text and --json show the record,
// the next answer, every decision with its principal and transport, the
// entity and its deferral; a key without a record exits 1, a usage error 2,
// a caller without the read role 3, before anything is shown.
func TestInspect(t *testing.T) {
	hooks, hooksLines := newToken(t, "hooks")
	writer, writerLines := newToken(t, "writer")
	dir := t.TempDir()
	authFile := filepath.Join(dir, "auth.yaml")
	file := "version: 1\n" + hooksLines + "    namespaces: [billing]\n    roles: [claim, read]\n" +
		strings.TrimPrefix(writerLines, "principals:\n") + "    namespaces: [billing]\n    roles: [claim]\n"
	if err := os.WriteFile(authFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "hooks.token")
	if err := os.WriteFile(tokenFile, []byte(hooks+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", authFile)
	conn := p.conn(t)
	waitServing(t, conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+hooks)
	claims := pb.NewClaimServiceClient(conn)
	claim := func(holder string, event, eventType string, lease time.Duration) *pb.ClaimResponse {
		t.Helper()
		res, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: event},
			Holder: holder, Lease: durationpb.New(lease), EntityId: "ch_1", EventType: eventType})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := claim("pod-a", "evt_charge", "charge.succeeded", 100*time.Millisecond)
	if first.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim = %v, want ACQUIRED", first.GetOutcome())
	}
	if res := claim("pod-r", "evt_refund", "charge.refunded", time.Minute); res.GetOutcome() != pb.Outcome_OUTCOME_DEFERRED {
		t.Fatalf("Claim(refund) = %v, want DEFERRED", res.GetOutcome())
	}
	// Wait, bounded, until Get says the lease is over (Get writes nothing).
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_charge"})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetNext().GetReason() == pb.Reason_REASON_LEASE_EXPIRED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get next = %v 10s after a lease of 100ms", got.GetNext())
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := claim("pod-b", "evt_charge", "charge.succeeded", time.Minute)
	if took.GetReason() != pb.Reason_REASON_LEASE_EXPIRED {
		t.Fatalf("Claim(pod-b) = %v/%v, want ACQUIRED/LEASE_EXPIRED", took.GetOutcome(), took.GetReason())
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		req := &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_charge", FencingToken: took.GetFencingToken(),
			LeaseSecret: took.GetLeaseSecret(), To: to}
		if to == pb.EventState_EVENT_STATE_SETTLED {
			req.Result, req.EffectRecovered = []byte(`{"ok":true}`), true
		}
		if _, err := claims.Transition(ctx, req); err != nil {
			t.Fatal(err)
		}
	}

	inspect := func(args ...string) result {
		t.Helper()
		return runEnv(t, nil, append([]string{"inspect", "--address", p.grpc, "--namespace", "billing", "--provider", "stripe"}, args...)...)
	}
	r := inspect("--key", "evt_charge", "--token-file", tokenFile)
	if r.code != 0 {
		t.Fatalf("claimd inspect = exit %d, stderr %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"billing/stripe/evt_charge",
		"state         SETTLED (token 2, attempt 2)",
		"holder        pod-b",
		"lifecycle     charge.succeeded of entity ch_1 (charge)",
		"next delivery: DUPLICATE until ",
		"settled; duplicates are suppressed until the window ends",
		"audit trail, oldest first (4 entries):",
		"claim       ACQUIRED NEW            RECEIVED    1      pod-a   hooks      grpc",
		"claim       ACQUIRED LEASE_EXPIRED  RECEIVED    2      pod-b   hooks      grpc       takeover: the previous holder's lease ran out",
		"transition  → PROCESSING            PROCESSING  2      pod-b   hooks      grpc",
		"transition  → SETTLED               SETTLED     2      pod-b   hooks      grpc       effect recovered",
		"entity ch_1 (charge):",
		"state succeeded, version 1, free",
		"charge.succeeded  token 2",
		"deferred, ready (its next retry applies)  charge.refunded  evt_refund  1×",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("claimd inspect output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = inspect("--key", "evt_charge", "--json", "--token", hooks)
	var doc struct {
		Record   *struct{ State, Holder, FencingToken string }
		Next     *struct{ Outcome, Until, Explanation string }
		Audit    []struct{ Op, Outcome, Reason, State, Holder, Principal, Transport string }
		Entity   *struct{ State string }
		Deferred []struct{ Key string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil {
		t.Fatalf("claimd inspect --json = exit %d, %s %s; want one JSON document", r.code, r.stdout, r.stderr)
	}
	if doc.Record == nil || doc.Record.State != "EVENT_STATE_SETTLED" || doc.Record.FencingToken != "2" || doc.Next == nil ||
		doc.Next.Outcome != "OUTCOME_DUPLICATE" || doc.Next.Until == "" || doc.Entity == nil || doc.Entity.State != "succeeded" ||
		len(doc.Deferred) != 1 || doc.Deferred[0].Key != "evt_refund" || len(doc.Audit) != 4 {
		t.Fatalf("claimd inspect --json = %s", r.stdout)
	}
	if a := doc.Audit[1]; a.Op != "AUDIT_OP_CLAIM" || a.Reason != "REASON_LEASE_EXPIRED" || a.Holder != "pod-b" || a.Principal != "hooks" || a.Transport != "grpc" {
		t.Errorf("claimd inspect --json audit[1] = %+v, want pod-b's takeover by hooks over grpc", a)
	}

	// The deferred refund has no record: exit 1, saying so, and its audit
	// row is still shown.
	r = inspect("--key", "evt_refund", "--token-file", tokenFile)
	if r.code != 1 || !strings.Contains(r.stderr, "no record of evt_refund") || !strings.Contains(r.stdout, "claim  DEFERRED") {
		t.Errorf("claimd inspect(deferred only) = exit %d, stdout %q, stderr %q; want exit 1, no record, its DEFERRED claim", r.code, r.stdout, r.stderr)
	}
	if r = inspect("--key", "evt_never", "--token-file", tokenFile); r.code != 1 || !strings.Contains(r.stderr, "no record of evt_never") {
		t.Errorf("claimd inspect(never claimed) = exit %d, stderr %q; want exit 1 saying there is no record", r.code, r.stderr)
	}
	if r = inspect("--token-file", tokenFile); r.code != 2 || !strings.Contains(r.stderr, "--key is required") {
		t.Errorf("claimd inspect without --key = exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	for _, tc := range []struct {
		desc, want string
		args       []string
	}{
		{"no token", "Unauthenticated", nil},
		{"a claim-only token", "PermissionDenied", []string{"--token", writer}},
		{"another namespace", "PermissionDenied", []string{"--token", hooks, "--namespace", "payouts"}},
	} {
		r := inspect(append([]string{"--key", "evt_charge"}, tc.args...)...)
		if r.code != 3 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("claimd inspect with %s = exit %d, stdout %q, stderr %q; want exit 3 saying %s and showing nothing", tc.desc, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}
