package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
)

// server is one real claimd for every test here; tests use distinct
// event ids.
var server *claimdtest.Server

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "claimd-go-example")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := claimdtest.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if server, err = claimdtest.Start(bin, filepath.Join(dir, "data")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := server.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

const secret = "whsec_test"

var seq atomic.Int64

func newEventID() string {
	return fmt.Sprintf("evt_example_%d_%d", time.Now().UnixNano(), seq.Add(1))
}

func event(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_%s","amount":2000,"currency":"usd"}}}`, id, id))
}

// signed returns a Stripe-Signature header for body.
func signed(body []byte, at time.Time) string {
	return fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(stripeSignature(secret, at.Unix(), body)))
}

// setup runs the receiver in-process behind httptest, with its own ledger.
func setup(t *testing.T) (*httptest.Server, *ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c, err := claimd.Dial(ctx, server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A namespace per test: entities (a charge, a payment intent) are per
	// namespace, so tests that replay one fixture never meet each other's.
	ns := fmt.Sprintf("example-%d", seq.Add(1))
	rc := &receiver{claimd: c, ledger: l, namespace: ns, secret: secret, log: slog.New(slog.DiscardHandler), now: time.Now}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", rc)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, l
}

type reply struct {
	Status int
	Body   string
}

func post(t *testing.T, url string, body []byte, signature string) reply {
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	req.Header.Set("Content-Type", "application/json")
	if signature != "" {
		req.Header.Set("Stripe-Signature", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b)}
}

func rows(t *testing.T, l *ledger, id string) int {
	t.Helper()
	n, err := l.Count(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSameEventTwice: Stripe's retry of a delivered event (a new signature
// timestamp, the same body) appends nothing and gets the first answer.
func TestSameEventTwice(t *testing.T) {
	srv, l := setup(t)
	id := newEventID()
	body := event(id)
	first := post(t, srv.URL, body, signed(body, time.Now()))
	second := post(t, srv.URL, body, signed(body, time.Now().Add(time.Second)))
	want := reply{200, `{"ledger_row":1}`}
	if diff := cmp.Diff([]reply{want, want}, []reply{first, second}); diff != "" {
		t.Errorf("two deliveries of %s (-want +got):\n%s", id, diff)
	}
	if n := rows(t, l, id); n != 1 {
		t.Errorf("ledger rows for %s = %d, want 1", id, n)
	}
}

// TestConcurrentDeliveries: 20 simultaneous deliveries of one event append
// one row; the others are told it is in progress or already done.
func TestConcurrentDeliveries(t *testing.T) {
	srv, l := setup(t)
	id := newEventID()
	body := event(id)
	const n = 20
	var wg sync.WaitGroup
	replies := make([]reply, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = post(t, srv.URL, body, signed(body, time.Now()))
		}()
	}
	wg.Wait()
	ok := 0
	for i, r := range replies {
		switch {
		case r == reply{200, `{"ledger_row":1}`}:
			ok++
		case r.Status == http.StatusConflict:
		default:
			t.Errorf("delivery %d of %s = %+v, want 200 with row 1 or 409", i, id, r)
		}
	}
	if ok == 0 {
		t.Errorf("no delivery of %s answered 200", id)
	}
	if got := rows(t, l, id); got != 1 {
		t.Errorf("ledger rows for %s after %d concurrent deliveries = %d, want 1", id, n, got)
	}
}

func TestRejectedDeliveries(t *testing.T) {
	srv, l := setup(t)
	tests := []struct {
		desc       string
		body       func(id string) []byte
		signature  func(body []byte) string
		wantStatus int
	}{
		{desc: "unsigned", body: event, signature: func([]byte) string { return "" }, wantStatus: 400},
		{desc: "wrong signature", body: event, signature: func(b []byte) string { return signed(append([]byte("x"), b...), time.Now()) }, wantStatus: 400},
		{desc: "replayed signature", body: event, signature: func(b []byte) string { return signed(b, time.Now().Add(-time.Hour)) }, wantStatus: 400},
		{desc: "not JSON (claimd cannot derive a key)", body: func(string) []byte { return []byte("not json") }, signature: func(b []byte) string { return signed(b, time.Now()) }, wantStatus: 400},
		{desc: "no type: failed for good, acknowledged", body: func(id string) []byte { return []byte(fmt.Sprintf(`{"id":%q}`, id)) }, signature: func(b []byte) string { return signed(b, time.Now()) }, wantStatus: 200},
	}
	for _, tt := range tests {
		id := newEventID()
		body := tt.body(id)
		if r := post(t, srv.URL, body, tt.signature(body)); r.Status != tt.wantStatus {
			t.Errorf("%s: POST = %+v, want status %d", tt.desc, r, tt.wantStatus)
		}
		if n := rows(t, l, id); n != 0 {
			t.Errorf("%s: ledger rows = %d, want 0", tt.desc, n)
		}
	}
}

func TestVerifyStripeSignature(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	good := hex.EncodeToString(stripeSignature(secret, now.Unix(), body))
	tests := []struct {
		desc    string
		header  string
		wantErr bool
	}{
		{desc: "valid", header: fmt.Sprintf("t=%d,v1=%s", now.Unix(), good)},
		{desc: "valid among rotated secrets", header: fmt.Sprintf("t=%d,v1=%s,v1=%s,v0=abc", now.Unix(), strings.Repeat("0", 64), good)},
		{desc: "empty", header: "", wantErr: true},
		{desc: "no timestamp", header: "v1=" + good, wantErr: true},
		{desc: "bad timestamp", header: "t=x,v1=" + good, wantErr: true},
		{desc: "only v0", header: fmt.Sprintf("t=%d,v0=%s", now.Unix(), good), wantErr: true},
		{desc: "too old", header: fmt.Sprintf("t=%d,v1=%s", now.Add(-6*time.Minute).Unix(), hex.EncodeToString(stripeSignature(secret, now.Add(-6*time.Minute).Unix(), body))), wantErr: true},
		{desc: "other secret", header: fmt.Sprintf("t=%d,v1=%s", now.Unix(), hex.EncodeToString(stripeSignature("whsec_other", now.Unix(), body))), wantErr: true},
	}
	for _, tt := range tests {
		if err := verifyStripeSignature(tt.header, body, secret, now); (err != nil) != tt.wantErr {
			t.Errorf("%s: verifyStripeSignature(%q) = %v, want error %v", tt.desc, tt.header, err, tt.wantErr)
		}
	}
}

// TestDefaultListenBesideClaimd: the receiver's default address is free
// while `make run` serves on claimd's defaults, and the README's commands
// use the address the code does.
func TestDefaultListenBesideClaimd(t *testing.T) {
	for _, claimds := range []string{"127.0.0.1:50051", "127.0.0.1:8080"} {
		if defaultListen == claimds {
			t.Errorf("defaultListen = %s, which claimd's make run listens on", defaultListen)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"receiver on " + defaultListen, "`--listen` (" + defaultListen + ")", "POST " + defaultListen + "/webhooks/stripe"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}

// TestRun starts the receiver as main does and delivers one event twice
// over real HTTP.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledgerPath := filepath.Join(t.TempDir(), "ledger.db")
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	args := []string{"--listen", "127.0.0.1:0", "--claimd", server.Addr, "--ledger", ledgerPath, "--namespace", "example-run", "--stripe-secret", secret}
	go func() { done <- run(ctx, args, t.Output(), func(a net.Addr) { addrs <- a }) }()
	var url string
	select {
	case a := <-addrs:
		url = "http://" + a.String()
	case err := <-done:
		t.Fatalf("run(%q) = %v before listening", args, err)
	}
	id := newEventID()
	body := event(id)
	for i := range 2 {
		if r := post(t, url, body, signed(body, time.Now())); r != (reply{200, `{"ledger_row":1}`}) {
			t.Errorf("delivery %d = %+v, want 200 with row 1", i+1, r)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after cancel = %v, want nil", err)
	}
	l, err := openLedger(context.Background(), ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := rows(t, l, id); n != 1 {
		t.Errorf("ledger rows for %s = %d, want 1", id, n)
	}
}
