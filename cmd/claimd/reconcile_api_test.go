package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// stripePages is the fixture of three Stripe /v1/events list pages (33
// events of nine payments; see its SOURCE.md).
const stripePages = "../../internal/reconcile/testdata/stripe_events_pages.json"

// The fixture's events this test handles otherwise than settling them.
const (
	evtStuck    = "evt_3QfUoY4gY42eZvKYlo2Cha3Q" // charge.refunded: claimed, PROCESSING, its lease ended
	evtFailed   = "evt_3QQfzWwuGU2eZvKYlo2CZ6MU" // charge.dispute.created: the handler gave up
	evtDeferred = "evt_3Q3mAuJ8QP2eZvKYlo2CU6yM" // charge.refunded of a charge whose charge.succeeded never came
)

// neverClaimed are the fixture's events no handler claims: the provider
// sent them and claimd never saw them.
var neverClaimed = []string{
	"evt_3Q7wDlPibB2eZvKYlo2CIsIo", // charge.succeeded (hence the refund after it waits)
	"evt_3Q36VXCKBk2eZvKYlo2C7oHN", // payment_intent.succeeded
	"evt_3QHCPMG58u2eZvKYlo2Cy92x", // payment_intent.created
}

// recentPages rewrites the fixture's pages as an export made now would
// read: every created time moved by one offset so that the newest event is
// 30 minutes old (older than --min-age, well inside Stripe's 84h window).
// It returns the file and the events, oldest first, as raw JSON.
func recentPages(t *testing.T) (string, []json.RawMessage) {
	t.Helper()
	raw, err := os.ReadFile(stripePages)
	if err != nil {
		t.Fatal(err)
	}
	type page struct {
		Object  string                       `json:"object"`
		Data    []map[string]json.RawMessage `json:"data"`
		HasMore bool                         `json:"has_more"`
		URL     string                       `json:"url"`
	}
	var pages []page
	dec := json.NewDecoder(bytes.NewReader(raw))
	newest := int64(0)
	for dec.More() {
		var p page
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Data {
			var c int64
			if err := json.Unmarshal(e["created"], &c); err != nil {
				t.Fatal(err)
			}
			newest = max(newest, c)
		}
		pages = append(pages, p)
	}
	shift := time.Now().Add(-30*time.Minute).Unix() - newest
	var out bytes.Buffer
	var events []json.RawMessage
	for _, p := range pages {
		for _, e := range p.Data {
			var c int64
			_ = json.Unmarshal(e["created"], &c)
			e["created"], _ = json.Marshal(c + shift)
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, b)
		}
		b, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	slices.Reverse(events) // Stripe lists newest first
	return writeFile(t, "events.json", out.String()), events
}

// eventID reads an event's id.
func eventID(t *testing.T, e json.RawMessage) string {
	t.Helper()
	var v struct{ ID string }
	if err := json.Unmarshal(e, &v); err != nil {
		t.Fatal(err)
	}
	return v.ID
}

// pushCapture stands in for a Pushgateway: it keeps what each push sent.
type pushCapture struct {
	mu     sync.Mutex
	pushes []capturedPush
}

type capturedPush struct {
	method, path string
	series       map[string]float64 // "kind/provider" -> value
}

func (c *pushCapture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := capturedPush{method: r.Method, path: r.URL.Path, series: map[string]float64{}}
	dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); err != nil {
			if err != io.EOF {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			break
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			p.series[mf.GetName()+"{"+ls["kind"]+","+ls["provider"]+"}"] = m.GetCounter().GetValue()
		}
	}
	c.mu.Lock()
	c.pushes = append(c.pushes, p)
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (c *pushCapture) all() []capturedPush {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pushes)
}

// reconcileJSON is the part of --json's output the test reads.
type reconcileJSON struct {
	Namespace   string         `json:"namespace"`
	Provider    string         `json:"provider"`
	Events      int            `json:"events"`
	NeedsPerson int            `json:"needs_person"`
	Counts      map[string]int `json:"counts"`
	Findings    []struct {
		Kind    string `json:"kind"`
		EventID string `json:"event_id"`
		Type    string `json:"type"`
		State   string `json:"state"`
		Holder  string `json:"holder"`
	} `json:"findings"`
}

// TestReconcileStripeExport: claimd serves a namespace where handlers
// settled most of a Stripe export's events, left one PROCESSING with its
// lease ended, failed one, had one deferred (its charge's success never
// came) and never claimed three. claimd reconcile, over the API with the
// handlers' read token, finds exactly the three never delivered, the stuck
// and the failed one, exits 1, prints parseable JSON with --json, writes
// the counts to a textfile and pushes them to a Pushgateway; a run over the
// settled events only is clean and exits 0 with zero counts.
func TestReconcileStripeExport(t *testing.T) {
	token := auth.NewToken()
	authFile := writeFile(t, "auth.yaml", "version: 1\nprincipals:\n  hooks:\n    tokens: [\""+auth.HashToken(token)+"\"]\n    namespaces: [billing]\n    roles: [claim, read]\n")
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", authFile, "--log-format", "json")
	conn := p.conn(t)
	waitServing(t, conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	claims := pb.NewClaimServiceClient(conn)

	file, events := recentPages(t)
	var settled []json.RawMessage
	var stuckLease time.Time
	for _, e := range events {
		id := eventID(t, e)
		if slices.Contains(neverClaimed, id) {
			continue
		}
		req := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Holder: "hooks-0",
			Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: map[string]string{"Stripe-Signature": "t=1,v1=00"}, Body: e}}}
		if id == evtStuck {
			req.Lease = durationpb.New(time.Millisecond)
		}
		c, err := claims.Claim(ctx, req)
		if err != nil {
			t.Fatalf("Claim(%s): %v", id, err)
		}
		if id == evtDeferred {
			if c.Outcome != pb.Outcome_OUTCOME_DEFERRED {
				t.Fatalf("Claim(%s, a refund before its charge succeeded) = %v, want DEFERRED", id, c.Outcome)
			}
			continue
		}
		if c.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("Claim(%s) = %v %v, want ACQUIRED", id, c.Outcome, c.Entity)
		}
		step := func(to pb.EventState) *pb.Record {
			t.Helper()
			r, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: c.Key,
				FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: to})
			if err != nil {
				t.Fatalf("Transition(%s, %v): %v", id, to, err)
			}
			return r.Record
		}
		switch id {
		case evtFailed:
			step(pb.EventState_EVENT_STATE_FAILED)
		case evtStuck:
			stuckLease = step(pb.EventState_EVENT_STATE_PROCESSING).LeaseExpiresAt.AsTime()
		default:
			step(pb.EventState_EVENT_STATE_PROCESSING)
			step(pb.EventState_EVENT_STATE_SETTLED)
			settled = append(settled, e)
		}
	}
	if len(settled) != 27 {
		t.Fatalf("settled %d events, want 27", len(settled))
	}
	// The stuck event's 1ms lease: reconcile judges it ended once the clock
	// passed it (bounded wait on the clock, not on a guess).
	for deadline := time.Now().Add(5 * time.Second); !time.Now().After(stuckLease); {
		if time.Now().After(deadline) {
			t.Fatalf("the clock never passed the stuck lease's end %v", stuckLease)
		}
		time.Sleep(time.Millisecond)
	}

	gateway := &pushCapture{}
	srv := httptest.NewServer(gateway)
	defer srv.Close()
	textfile := filepath.Join(t.TempDir(), "claimd_reconcile.prom")
	env := []string{"CLAIMD_TOKEN=" + token}
	base := []string{"reconcile", "--address", p.grpc, "--namespace", "billing", "--provider", "stripe", "--events", file}

	r := runEnv(t, env, append(base, "--metrics-textfile", textfile, "--pushgateway", srv.URL)...)
	if r.code != 1 {
		t.Fatalf("claimd reconcile = exit %d, want 1 (events need a person)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	want := map[string]string{evtStuck: "stuck", evtFailed: "failed"}
	for _, id := range neverClaimed {
		want[id] = "never_delivered"
	}
	got := map[string]string{}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "KIND") {
		t.Fatalf("claimd reconcile printed no table:\n%s", r.stdout)
	}
	for _, l := range lines[1 : len(lines)-1] {
		f := strings.Fields(l)
		got[f[1]] = f[0]
	}
	if !maps.Equal(got, want) {
		t.Errorf("claimd reconcile table lists %v, want exactly %v:\n%s", got, want, r.stdout)
	}
	summary := lines[len(lines)-1]
	for _, s := range []string{"33 events of stripe compared with namespace billing", "3 never_delivered", "1 stuck", "1 failed", "27 settled", "1 waiting", "5 need a person"} {
		if !strings.Contains(summary, s) {
			t.Errorf("summary line %q lacks %q", summary, s)
		}
	}
	if !strings.Contains(r.stderr, "5 of the provider's events need a person") {
		t.Errorf("stderr = %q, want it to say 5 events need a person", r.stderr)
	}

	// --json: one object, the same findings.
	r = runEnv(t, env, append(base, "--json")...)
	var rep reconcileJSON
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
		t.Fatalf("claimd reconcile --json = exit %d, %v\n%s", r.code, err, r.stdout)
	}
	got = map[string]string{}
	for _, f := range rep.Findings {
		got[f.EventID] = f.Kind
		if f.EventID == evtStuck && (f.State != "PROCESSING" || f.Holder != "hooks-0" || f.Type != "charge.refunded") {
			t.Errorf("--json stuck finding = %+v, want PROCESSING, holder hooks-0, charge.refunded", f)
		}
	}
	wantCounts := map[string]int{"never_delivered": 3, "stuck": 1, "failed": 1, "settled": 27, "waiting": 1}
	if !maps.Equal(got, want) || rep.NeedsPerson != 5 || rep.Events != 33 || !maps.Equal(rep.Counts, wantCounts) {
		t.Errorf("--json = %+v, want findings %v, 5 needing a person of 33, counts %v", rep, want, wantCounts)
	}

	// --types: only the charge events (the types an endpoint subscribed
	// to): the never delivered charge.succeeded, the stuck refund and the
	// failed dispute.
	r = runEnv(t, env, append(base, "--json", "--types", "charge.*, charge.dispute.created")...)
	rep = reconcileJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.NeedsPerson != 3 || rep.Counts["never_delivered"] != 1 {
		t.Errorf("claimd reconcile --types charge.* = exit %d, %v, %+v; want 3 needing a person, 1 never delivered", r.code, err, rep)
	}

	// The counts, as node-exporter and the Pushgateway receive them.
	text, err := os.ReadFile(textfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`claimd_reconciliation_mismatch_total{kind="never_delivered",provider="stripe"} 3`,
		`claimd_reconciliation_mismatch_total{kind="stuck",provider="stripe"} 1`,
		`claimd_reconciliation_mismatch_total{kind="failed",provider="stripe"} 1`,
		`claimd_reconciliation_mismatch_total{kind="deferred",provider="stripe"} 0`,
	} {
		if !strings.Contains(string(text), s+"\n") {
			t.Errorf("--metrics-textfile lacks %s:\n%s", s, text)
		}
	}
	pushes := gateway.all()
	wantSeries := map[string]float64{
		"claimd_reconciliation_mismatch_total{never_delivered,stripe}": 3,
		"claimd_reconciliation_mismatch_total{stuck,stripe}":           1,
		"claimd_reconciliation_mismatch_total{failed,stripe}":          1,
		"claimd_reconciliation_mismatch_total{deferred,stripe}":        0,
	}
	// The grouping key, as the path's label/value pairs (in no set order).
	groupingKey := func(path string) map[string]string {
		parts := strings.Split(strings.TrimPrefix(path, "/metrics/"), "/")
		key := map[string]string{}
		for i := 0; i+1 < len(parts); i += 2 {
			key[parts[i]] = parts[i+1]
		}
		return key
	}
	wantKey := map[string]string{"job": "claimd_reconcile", "namespace": "billing", "instance": "stripe"}
	if len(pushes) != 1 || pushes[0].method != http.MethodPut || !maps.Equal(groupingKey(pushes[0].path), wantKey) ||
		!maps.Equal(pushes[0].series, wantSeries) {
		t.Errorf("pushes = %+v, want one PUT with grouping key %v and %v", pushes, wantKey, wantSeries)
	}

	// Only the settled events: clean, exit 0, and zero counts that resolve
	// the alert.
	var jsonl bytes.Buffer
	for _, e := range settled {
		jsonl.Write(e)
		jsonl.WriteByte('\n')
	}
	clean := writeFile(t, "settled.jsonl", jsonl.String())
	r = runEnv(t, env, "reconcile", "--address", p.grpc, "--namespace", "billing", "--provider", "stripe", "--events", clean, "--metrics-textfile", textfile)
	if r.code != 0 || !strings.Contains(r.stdout, "27 events of stripe compared with namespace billing: 27 settled; 0 need a person") {
		t.Errorf("claimd reconcile of the settled events = exit %d\n%s%s; want exit 0 and 27 settled", r.code, r.stdout, r.stderr)
	}
	if text, _ := os.ReadFile(textfile); !strings.Contains(string(text), `claimd_reconciliation_mismatch_total{kind="never_delivered",provider="stripe"} 0`) {
		t.Errorf("a clean run's textfile:\n%s\nwant never_delivered 0", text)
	}
	p.stop(t)
}

// TestReconcileRefusesStrangers: without a token, with an unknown one, or
// with a token of another namespace, claimd refuses reconcile's reads; the
// command exits 2 (it could not tell) and publishes nothing.
func TestReconcileRefusesStrangers(t *testing.T) {
	token := auth.NewToken()
	authFile := writeFile(t, "auth.yaml", "version: 1\nprincipals:\n  payouts:\n    tokens: [\""+auth.HashToken(token)+"\"]\n    namespaces: [payouts]\n    roles: [read]\n")
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", authFile, "--log-format", "json")
	waitServing(t, p.conn(t))
	events := writeFile(t, "events.jsonl", `{"id":"evt_1","object":"event","type":"charge.succeeded","created":1}`+"\n")
	for _, tc := range []struct {
		desc, token, ns, want string
	}{
		{"no token", "", "billing", "Unauthenticated"},
		{"an unknown token", auth.NewToken(), "billing", "Unauthenticated"},
		{"another namespace's token", token, "billing", "PermissionDenied"},
	} {
		textfile := filepath.Join(t.TempDir(), "claimd_reconcile.prom")
		r := runEnv(t, []string{"CLAIMD_TOKEN=" + tc.token}, "reconcile", "--address", p.grpc, "--namespace", tc.ns, "--provider", "stripe",
			"--events", events, "--metrics-textfile", textfile)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: claimd reconcile = exit %d, stderr %q; want exit 2 saying %s", tc.desc, r.code, r.stderr, tc.want)
		}
		if _, err := os.Stat(textfile); !os.IsNotExist(err) {
			t.Errorf("%s: a refused run wrote %s (%v)", tc.desc, textfile, err)
		}
	}
	p.stop(t)
}

// TestReconcileOverMTLS: as the chart's CronJob runs it, against a claimd
// with TLS, client certificates required and an auth file: the job's CA
// file, client certificate and read token get it through; without the
// certificate the handshake is refused and the command exits 2.
func TestReconcileOverMTLS(t *testing.T) {
	t.Parallel()
	f := newServerFiles(t)
	token := auth.NewToken()
	authFile := writeFile(t, "auth.yaml", "version: 1\nprincipals:\n  reconcile:\n    tokens: [\""+auth.HashToken(token)+"\"]\n    namespaces: [billing]\n    roles: [read]\n")
	p := start(t, "--tls-cert", f.cert.CertFile, "--tls-key", f.cert.KeyFile, "--tls-client-ca", f.ca.File(),
		"--auth-file", authFile, "--data-dir", t.TempDir(), "--log-format", "json")
	job := f.ca.Issue(t, "spiffe://claimd.test/reconcile")
	events := writeFile(t, "events.jsonl", `{"id":"evt_tls","object":"event","type":"charge.succeeded","created":`+strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)+`}`+"\n")
	base := []string{"reconcile", "--address", p.grpc, "--namespace", "billing", "--provider", "stripe", "--events", events, "--ca-file", f.ca.File()}
	env := []string{"CLAIMD_TOKEN=" + token}

	r := runEnv(t, env, append(base, "--cert-file", job.CertFile, "--key-file", job.KeyFile)...)
	if r.code != 1 || !strings.Contains(r.stdout, "1 events of stripe compared with namespace billing: 1 never_delivered") {
		t.Errorf("claimd reconcile over mTLS with a token = exit %d\n%s%s; want exit 1 and the event never delivered", r.code, r.stdout, r.stderr)
	}
	// The handshake fails at every attempt until --timeout.
	r = runEnv(t, env, append(base, "--timeout", "2s")...)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "not reachable") {
		t.Errorf("claimd reconcile without a client certificate = exit %d\n%s%s; want exit 2, no findings, claimd not reachable", r.code, r.stdout, r.stderr)
	}
	p.stop(t)
}
