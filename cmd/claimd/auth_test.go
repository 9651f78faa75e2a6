package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// newToken runs `claimd token new --principal name` and returns the token
// and the auth file lines it printed.
func newToken(t *testing.T, name string) (token, snippet string) {
	t.Helper()
	out, code := run(t, "token", "new", "--principal", name)
	if code != 0 {
		t.Fatalf("claimd token new exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token = lines[0]
	var yaml []string
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "#") {
			yaml = append(yaml, l)
		}
	}
	snippet = strings.Join(yaml, "\n") + "\n"
	if want := `    tokens: ["` + auth.HashToken(token) + `"]`; !strings.Contains(snippet, want) {
		t.Fatalf("claimd token new printed\n%s\nwant the line %s", out, want)
	}
	return token, snippet
}

func TestTokenCommand(t *testing.T) {
	for _, tc := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"token"}, 2, "usage: claimd token new"},
		{"unknown subcommand", []string{"token", "list"}, 2, "want the subcommand new"},
		{"bad principal name", []string{"token", "new", "--principal", "Billing Hooks"}, 2, "must match"},
		{"without a principal", []string{"token", "new"}, 0, "    tokens: [\"sha256:"},
	} {
		out, code := run(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%s: claimd %v = exit %d, %q; want exit %d and %q", tc.desc, tc.args, code, out, tc.code, tc.want)
		}
	}
}

// TestServeWithAuthFile: a token made by `claimd token new`, pasted into an
// auth file, authenticates calls to `claimd serve --auth-file`; SIGHUP and
// an edit of the file reload it.
func TestServeWithAuthFile(t *testing.T) {
	token, snippet := newToken(t, "billing-hooks")
	scraper := auth.NewToken()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := "version: 1\n" + snippet + "    namespaces: [billing]\n    roles: [claim, read]\n" +
		"  prometheus:\n    tokens: [\"" + auth.HashToken(scraper) + "\"]\n    roles: [metrics]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", path, "--log-format", "json", "--file-check-interval", "50ms")
	conn := p.conn(t)
	waitServing(t, conn) // health stays open without credentials
	claims := pb.NewClaimServiceClient(conn)
	with := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	claim := func(ctx context.Context, ns string) error {
		_, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: ns, Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_auth"}})
		return err
	}

	if err := claim(context.Background(), "billing"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Claim without a token error = %v, want Unauthenticated", err)
	}
	if err := claim(with(token), "billing"); err != nil {
		t.Errorf("Claim with the token error = %v, want nil", err)
	}
	if err := claim(with(token), "payouts"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Claim outside the principal's namespaces error = %v, want PermissionDenied", err)
	}
	p.logs.wait(t, "for the refusal", func(r map[string]any) bool {
		return r["msg"] == "call refused" && r["principal"] == "billing-hooks" && r["reason"] == auth.ReasonNamespaceDenied
	})
	code, body := getAs(t, "http://"+p.http+"/metrics", scraper)
	for _, want := range []string{
		`claimd_auth_denied_total{reason="CREDENTIALS_MISSING"} 1`,
		`claimd_auth_denied_total{reason="NAMESPACE_DENIED"} 1`,
		`claimd_claims_total{key_source="EVENT_ID",namespace="billing",outcome="ACQUIRED",provider="stripe",reason="NEW",served_by="DURABLE"} 1`,
		`grpc_server_handled_total{grpc_code="PermissionDenied",grpc_method="Claim",grpc_service="idempotency.v1.ClaimService",grpc_type="unary"} 1`,
		`claimd_auth_principals 2`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics as prometheus (role metrics) = %d, lacks %q", code, want)
		}
	}
	// /metrics needs role metrics (or admin) once there is an auth file.
	for _, tc := range []struct {
		desc, token string
		code        int
		want        string
	}{
		{"without a token", "", 401, auth.ReasonCredentialsMissing},
		{"with an unknown token", auth.NewToken(), 401, auth.ReasonTokenUnknown},
		{"as billing-hooks (claim, read)", token, 403, "principal billing-hooks (roles claim,read) may not read /metrics: it needs role metrics"},
	} {
		if code, body := getAs(t, "http://"+p.http+"/metrics", tc.token); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("/metrics %s = %d %q, want %d saying %q", tc.desc, code, body, tc.code, tc.want)
		}
	}

	// SIGHUP reloads (and no longer ends the process).
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.logs.wait(t, "after SIGHUP", func(r map[string]any) bool { return r["msg"] == "auth file reloaded" })

	// An edit that replaces the token is picked up without a signal.
	token2, snippet2 := newToken(t, "billing-hooks")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("version: 1\n"+snippet2+"    namespaces: [billing]\n    roles: [claim, read]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	// The first call after the check interval reads the edit and is
	// decided by it: the new token is let in within a few intervals.
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for err := claim(with(token2), "billing"); err != nil; err = claim(with(token2), "billing") {
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Claim with the new token error = %v, want nil once the edit is read", err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("Claim with the new token still refused 10s after the edit (check interval 50ms): %v", err)
		}
	}
	p.logs.wait(t, "after the edit", func(r map[string]any) bool { return r["msg"] == "auth file reloaded" })
	if err := claim(with(token), "billing"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Claim with the replaced token error = %v, want Unauthenticated", err)
	}
	for _, l := range p.logs.all() {
		if strings.Contains(l, token[len(auth.TokenPrefix):]) || strings.Contains(l, token2[len(auth.TokenPrefix):]) {
			t.Errorf("a log line carries a token: %s", l)
		}
	}
	p.stop(t)
}

// getAs GETs url with token as its bearer token ("" for none).
func getAs(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sendAs(t, req, token)
}

func TestServeRefusesBrokenAuthFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(path, []byte("version: 1\nprincipals:\n  a:\n    tokens: [\"cl_notahash\"]\n    namespaces: [x]\n    roles: [claim]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--auth-file", path)
	if code != 1 || !strings.Contains(out, path+":4: a: tokens lists a token itself, not its hash") {
		t.Errorf("serve with a broken auth file = exit %d, %q; want exit 1 naming the file, line and rule", code, out)
	}
}
