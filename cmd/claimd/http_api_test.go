package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/server"
)

// TestHTTPDefaults: the HTTP listener's default port is not Prometheus's
// own 9090, and it carries the API unless told not to.
func TestHTTPDefaults(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var c server.Config
	bindServe(fs, &c)
	if got := fs.Lookup("http-listen").DefValue; got != "127.0.0.1:8080" {
		t.Errorf("--http-listen default = %s, want 127.0.0.1:8080", got)
	}
	if got := fs.Lookup("http-api").DefValue; got != "true" {
		t.Errorf("--http-api default = %s, want true", got)
	}
}

// post sends body as JSON, as `curl --json` does.
func post(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return sendAs(t, req, token)
}

// sendAs sends req with token as its bearer token ("" for none) and returns
// the status and body of the answer.
func sendAs(t *testing.T, req *http.Request, token string) (int, string) {
	t.Helper()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// TestHTTPAPI runs `claimd serve --auth-file` and claims over REST on the
// HTTP listener: the bearer token admits the caller, a stranger is refused
// 401 CREDENTIALS_MISSING before its body is read (so the gRPC server
// never sees it, and claimd_auth_denied_total counts it), and the metrics
// on /metrics of the same listener count both calls. With --http-api=false only /metrics and the
// probes are served there.
func TestHTTPAPI(t *testing.T) {
	token := auth.NewToken()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := "version: 1\nprincipals:\n  hooks:\n    tokens: [\"" + auth.HashToken(token) + "\"]\n    namespaces: [billing]\n    roles: [claim, read, metrics]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", path, "--log-format", "json")
	waitServing(t, p.conn(t))
	base := "http://" + p.http
	claim := `{"namespace":"billing","provider":"stripe","eventId":"evt_http","holder":"curl"}`

	status, body := post(t, base+"/v1/claims", token, claim)
	var acq struct{ Outcome, Key, LeaseSecret, FencingToken string }
	if err := json.Unmarshal([]byte(body), &acq); status != 200 || err != nil || acq.Outcome != "OUTCOME_ACQUIRED" || acq.LeaseSecret == "" {
		t.Fatalf("POST /v1/claims with a token = %d %s, want 200 ACQUIRED", status, body)
	}
	// A guard's settle with the result of an earlier holder's effect fence:
	// effectRecovered goes with SETTLED only, and is counted.
	transition := func(to string, recovered bool) (int, string) {
		t.Helper()
		return post(t, base+"/v1/claims/evt_http:transition", token, fmt.Sprintf(
			`{"namespace":"billing","provider":"stripe","fencingToken":%q,"leaseSecret":%q,"to":%q,"effectRecovered":%v}`,
			acq.FencingToken, acq.LeaseSecret, to, recovered))
	}
	if status, body := transition("EVENT_STATE_PROCESSING", true); status != 400 || !strings.Contains(body, "TransitionRequest.effect_recovered") {
		t.Errorf("POST :transition to PROCESSING with effectRecovered = %d %s, want 400 naming TransitionRequest.effect_recovered", status, body)
	}
	for _, to := range []string{"EVENT_STATE_PROCESSING", "EVENT_STATE_SETTLED"} {
		if status, body := transition(to, to == "EVENT_STATE_SETTLED"); status != 200 || !strings.Contains(body, `"changed":true`) {
			t.Fatalf("POST :transition to %s = %d %s, want 200, changed", to, status, body)
		}
	}
	status, body = post(t, base+"/v1/claims", "", claim)
	if status != 401 || !strings.Contains(body, `"reason":"CREDENTIALS_MISSING"`) {
		t.Errorf("POST /v1/claims without a token = %d %s, want 401 with reason CREDENTIALS_MISSING", status, body)
	}
	status, body = getAs(t, base+"/metrics", token) // role metrics: an auth file guards /metrics
	for _, want := range []string{
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Claim",grpc_service="idempotency.v1.ClaimService",grpc_type="unary"} 1`,
		`claimd_auth_denied_total{reason="CREDENTIALS_MISSING"} 1`,
		`claimd_effects_recovered_total{provider="stripe"} 1`,
	} {
		if status != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics after two REST claims and a recovered settle lacks %s", want)
		}
	}
	p.stop(t)

	p = start(t, "--data-dir", t.TempDir(), "--http-api=false")
	waitServing(t, p.conn(t))
	if status, body := post(t, "http://"+p.http+"/v1/claims", "", claim); status != 404 {
		t.Errorf("POST /v1/claims with --http-api=false = %d %s, want 404", status, body)
	}
	if status, _ := get(t, "http://"+p.http+"/healthz"); status != 200 {
		t.Errorf("/healthz with --http-api=false = %d, want 200", status)
	}
	p.stop(t)
}
