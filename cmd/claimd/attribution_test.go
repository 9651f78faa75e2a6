package main

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// TestServeAttributesWrites: claimd serve with an auth file names the
// principal and the transport of each write in its log line and its audit
// row, and its log lines carry a key's bidi override escaped, never raw.
func TestServeAttributesWrites(t *testing.T) {
	token, snippet := newToken(t, "billing-hooks")
	path := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(path, []byte("version: 1\n"+snippet+"    namespaces: [billing]\n    roles: [claim, read]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	p := start(t, "--data-dir", dataDir, "--auth-file", path, "--log-format", "json")
	conn := p.conn(t)
	waitServing(t, conn)
	claims := pb.NewClaimServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)

	const key = "evt_\u202egnp.exe" // shown raw, it reads evt_exe.png
	c, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: key}})
	if err != nil || c.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(%q) = %v, %v; want ACQUIRED", key, c.GetOutcome(), err)
	}
	ns, prov, k, tok, secret := "billing", "stripe", c.GetKey(), c.GetFencingToken(), c.GetLeaseSecret()
	if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: k, FencingToken: tok, LeaseSecret: secret,
		To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatalf("Transition(%q) error = %v", key, err)
	}
	if _, err := claims.Renew(ctx, &pb.RenewRequest{Namespace: ns, Provider: prov, Key: k, FencingToken: tok, LeaseSecret: secret}); err != nil {
		t.Fatalf("Renew(%q) error = %v", key, err)
	}
	if _, err := claims.Release(ctx, &pb.ReleaseRequest{Namespace: ns, Provider: prov, Key: k, FencingToken: tok, LeaseSecret: secret}); err != nil {
		t.Fatalf("Release(%q) error = %v", key, err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+p.http+"/v1/claims",
		strings.NewReader(`{"namespace":"billing","provider":"stripe","eventId":"evt_http"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/claims = %d, want 200", res.StatusCode)
	}

	// The gateway names the protocol of an HTTP call: REST here.
	httpTransport := func(tr string) bool { return tr == auth.TransportREST }
	escaped := `evt_\u202egnp.exe`
	for _, m := range []string{"Claim", "Transition", "Renew", "Release"} {
		p.logs.wait(t, m+" of "+escaped+" by billing-hooks over grpc", func(r map[string]any) bool {
			return r["msg"] == m && r["key"] == escaped && r["principal"] == "billing-hooks" && r["transport"] == auth.TransportGRPC
		})
	}
	p.logs.wait(t, "Claim of evt_http by billing-hooks over HTTP", func(r map[string]any) bool {
		tr, _ := r["transport"].(string)
		return r["msg"] == "Claim" && r["key"] == "evt_http" && r["principal"] == "billing-hooks" && httpTransport(tr)
	})
	for _, line := range p.logs.all() {
		if r, ok := rawInvisible(line); ok {
			t.Errorf("log line carries %U raw: %q", r, line)
		}
	}
	p.stop(t)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, "claimd.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT key, op, principal, transport FROM audit_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct{ Key, Op, Principal, Transport string }
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.Key, &r.Op, &r.Principal, &r.Transport); err != nil {
			t.Fatal(err)
		}
		if r.Key == "evt_http" && httpTransport(r.Transport) {
			r.Transport = "HTTP"
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []row{
		{key, "claim", "billing-hooks", "grpc"}, {key, "transition", "billing-hooks", "grpc"},
		{key, "renew", "billing-hooks", "grpc"}, {key, "release", "billing-hooks", "grpc"},
		{"evt_http", "claim", "billing-hooks", "HTTP"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit_log (-want +got):\n%s", diff)
	}
}

// rawInvisible reports the first character of s that claimd's log should
// have escaped (internal/server's escapeLogAttr): a C1 control, a line or
// paragraph separator, or a bidirectional control.
func rawInvisible(s string) (rune, bool) {
	for _, r := range s {
		if (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 || unicode.Is(unicode.Bidi_Control, r) {
			return r, true
		}
	}
	return 0, false
}
