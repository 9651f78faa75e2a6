package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "TestOnCallPage writes its screenshots to docs/img/ for docs/on-call.md (also CLAIMD_UPDATE_SCREENSHOTS=1)")

// TestOnCallPage drives the on-call page in a real headless Chromium
// (Debian's package, scripts/test-deps.sh installs it) against claimd serve
// with an auth file: a stranger's browser gets the token form and no data,
// a wrong token is refused, and with the on-call engineer's token (read and
// metrics in billing) the page shows a settled key, a deferred Stripe
// payment_intent event with its entity's graph, a key taken over after its
// holder's lease ended, the overdue and deferred lists and the outcome
// rates; another namespace's reader gets neither the rates nor billing's
// keys. Every wait in the browser is on a DOM condition (the page marks its
// state on <body>); the one wait outside it is for a one-second lease to end
// on the clock both processes read. The screenshots are kept in the
// directory the test logs ($CLAIMD_TEST_ARTIFACTS/on-call, or under the
// system's temp dir), and -update-screenshots copies them to docs/img/.
func TestOnCallPage(t *testing.T) {
	t.Parallel()
	browser := chromiumPath(t)
	hooks, oncall, outsider := auth.NewToken(), auth.NewToken(), auth.NewToken()
	authPath := filepath.Join(t.TempDir(), "auth.yaml")
	file := fmt.Sprintf(`version: 1
principals:
  hooks:
    tokens: [%q]
    namespaces: [billing]
    roles: [claim]
  oncall:
    tokens: [%q]
    namespaces: [billing]
    roles: [read, metrics]
  outsider:
    tokens: [%q]
    namespaces: [payouts]
    roles: [read]
`, auth.HashToken(hooks), auth.HashToken(oncall), auth.HashToken(outsider))
	if err := os.WriteFile(authPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--data-dir", t.TempDir(), "--auth-file", authPath, "--log-format", "json")
	waitServing(t, p.conn(t))
	base := "http://" + p.http

	seed := seedOnCall(t, pb.NewClaimServiceClient(p.conn(t)), hooks)

	// A stranger gets no data from the API the page reads, and the page's
	// files name nothing of what they are asked about.
	record := base + "/v1/namespaces/billing/providers/stripe/claims/evt_ui_settled"
	for _, tc := range []struct {
		desc, token string
		want        int
		reason      string
	}{
		{"no token", "", 401, "CREDENTIALS_MISSING"},
		{"a token nobody holds", auth.NewToken(), 401, "TOKEN_UNKNOWN"},
		{"another namespace's reader", outsider, 403, "NAMESPACE_DENIED"},
		{"the claimer, without the read role", hooks, 403, "ROLE_DENIED"},
	} {
		if status, body := getAs(t, record, tc.token); status != tc.want || !strings.Contains(body, tc.reason) || strings.Contains(body, "pod-a") {
			t.Errorf("GET the settled record with %s = %d %s, want %d %s and no data", tc.desc, status, body, tc.want, tc.reason)
		}
	}
	if status, body := getAs(t, base+"/ui/?namespace=billing&provider=stripe&key=evt_ui_settled", ""); status != 200 || strings.Contains(body, "evt_ui_settled") || strings.Contains(body, "billing") {
		t.Errorf("GET /ui/?…key=evt_ui_settled without a token = %d, want 200 and a shell that names nothing:\n%s", status, body)
	}

	ctx := newBrowser(t, browser)
	shots := newShots(t)
	keyURL := func(key string) string { return base + "/ui/?namespace=billing&provider=stripe&key=" + key }

	// A stranger's browser: the token form, a refused token, no data.
	step(t, ctx, "a stranger opens a key",
		chromedp.Navigate(keyURL("evt_ui_settled")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="login"] #login-form`)),
	)
	step(t, ctx, "a stranger tries a token nobody holds",
		chromedp.SendKeys(chromedp.CSS(`#token`), auth.NewToken()),
		chromedp.Click(chromedp.CSS(`#use-token`)),
		chromedp.WaitVisible(chromedp.CSS(`#login-error:not([hidden])`)),
	)
	requireText(t, ctx, `#login-error`, "TOKEN_UNKNOWN")
	if n := count(t, ctx, `#view *`); n != 0 {
		t.Errorf("the stranger's page shows %d elements of data, want none", n)
	}

	// The on-call engineer: the token, then the key the URL names.
	step(t, ctx, "sign in and open the settled key",
		chromedp.SendKeys(chromedp.CSS(`#token`), oncall),
		chromedp.Click(chromedp.CSS(`#use-token`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #audit table`)),
	)
	requireText(t, ctx, `#record dd[data-field="state"]`, "SETTLED")
	requireText(t, ctx, `#record dd[data-field="holder"]`, "pod-a")
	requireText(t, ctx, `#record dd[data-field="result"]`, "booked ledger entry 42")
	requireText(t, ctx, `#next`, "DUPLICATE")
	requireText(t, ctx, `#audit tbody`, "hooks")
	requireText(t, ctx, `#audit tbody`, "SETTLED")
	if n := count(t, ctx, `#audit tbody tr`); n != 3 {
		t.Errorf("the settled key's audit trail has %d rows, want 3 (claim, PROCESSING, SETTLED)", n)
	}
	shots.take(t, ctx, "on-call-settled")

	// Search, as a person would: the form, then the deferred event's key.
	step(t, ctx, "search the deferred key",
		chromedp.SetValue(chromedp.CSS(`#q`), seed.deferredKey),
		chromedp.Click(chromedp.CSS(`#go`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #deferred-note`)),
		chromedp.WaitVisible(chromedp.CSS(`#entity svg.graph path.edge.deferred`)),
	)
	requireText(t, ctx, `#key-name`, seed.deferredKey)
	requireText(t, ctx, `#deferred-note`, "payment_intent.requires_action")
	requireText(t, ctx, `#deferred-note`, "payment_failed")
	requireText(t, ctx, `#entity-state`, "processing")
	if n := count(t, ctx, `#entity svg.graph path.edge.applied`); n != 1 {
		t.Errorf("the entity's graph marks %d applied transitions, want 1 (new → processing)", n)
	}
	requireText(t, ctx, `#entity .applied-events`, seed.appliedKey)
	requireText(t, ctx, `#audit`, "DEFERRED")
	shots.take(t, ctx, "on-call-deferred")

	step(t, ctx, "search the entity",
		chromedp.SetValue(chromedp.CSS(`#kind`), "entity"),
		chromedp.SetValue(chromedp.CSS(`#q`), "pi_ui"),
		chromedp.Click(chromedp.CSS(`#go`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #entity .lifecycle[data-lifecycle="payment_intent"] svg.graph`)),
	)
	if n := count(t, ctx, `#entity .lifecycle`); n != 1 {
		t.Errorf("the search for entity pi_ui shows %d lifecycles, want 1 (payment_intent; charge knows no pi_ui)", n)
	}
	requireText(t, ctx, `#entity .entity-keys`, seed.appliedKey)

	step(t, ctx, "open the key taken over",
		chromedp.Navigate(keyURL("evt_ui_takeover")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #audit tr.takeover`)),
	)
	requireText(t, ctx, `#audit tr.takeover`, "LEASE_EXPIRED")
	requireText(t, ctx, `#audit tr.takeover`, "pod-b")
	requireText(t, ctx, `#record dd[data-field="holder"]`, "pod-b")
	requireText(t, ctx, `#record dd[data-field="fencing token"]`, "2")
	requireText(t, ctx, `#next`, "IN_PROGRESS")
	shots.take(t, ctx, "on-call-takeover")

	step(t, ctx, "the overdue list",
		chromedp.Click(chromedp.CSS(`#tabs a[data-view="overdue"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #overdue-view`)),
	)
	requireText(t, ctx, `#overdue-view`, "evt_ui_stuck")
	if strings.Contains(text(t, ctx, `#overdue-view`), "evt_ui_takeover") {
		t.Errorf("the overdue list shows evt_ui_takeover, whose new holder's lease is live")
	}
	shots.take(t, ctx, "on-call-overdue")

	step(t, ctx, "the deferred list",
		chromedp.Click(chromedp.CSS(`#tabs a[data-view="deferred"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #deferred-view table`)),
	)
	requireText(t, ctx, `#deferred-view table`, seed.deferredKey)

	step(t, ctx, "the outcome rates",
		chromedp.Click(chromedp.CSS(`#tabs a[data-view="rates"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #rates-view[data-reads="1"] table.rates`)),
	)
	requireText(t, ctx, `#rates-view table.rates`, "billing")
	requireText(t, ctx, `#rates-view table.rates`, "DEFERRED")
	// Three duplicates between two reads of /metrics: the page's next read
	// (every 5 s) turns them into a rate.
	for range 3 {
		if res := seedClaim(t, pb.NewClaimServiceClient(p.conn(t)), hooks, "evt_ui_settled"); res.Outcome != pb.Outcome_OUTCOME_DUPLICATE {
			t.Fatalf("Claim(evt_ui_settled) again = %v, want DUPLICATE", res.Outcome)
		}
	}
	step(t, ctx, "the rates' second read",
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #rates-view[data-reads="2"] table.rates`)),
	)
	requireText(t, ctx, `#rates-view table.rates`, "DUPLICATE")
	requireText(t, ctx, `#rates-view table.rates`, "/s (3)")
	shots.take(t, ctx, "on-call-rates")

	// Another namespace's reader: the rates need the metrics role, and
	// billing's keys are not its to read.
	step(t, ctx, "sign in as another namespace's reader",
		chromedp.Click(chromedp.CSS(`#signout`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="login"] #login-form`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), outsider),
		chromedp.Click(chromedp.CSS(`#use-token`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="ready"] #rates-denied`)),
	)
	requireText(t, ctx, `#rates-denied`, "metrics")
	step(t, ctx, "the outsider opens billing's settled key",
		chromedp.Navigate(keyURL("evt_ui_settled")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-state="error"] #status.error`)),
	)
	requireText(t, ctx, `#status`, "NAMESPACE_DENIED")
	if n := count(t, ctx, `#view *`); n != 0 {
		t.Errorf("the outsider's page shows %d elements of billing's data, want none", n)
	}
	shots.done(t)
}

// seeded names what seedOnCall made.
type seeded struct {
	appliedKey, deferredKey string
}

// seedOnCall makes, as the claimer hooks, a settled key, a Stripe
// payment_intent event deferred for its entity, a key taken over after its
// holder's lease ended, and a key left PROCESSING past its lease.
func seedOnCall(t *testing.T, c pb.ClaimServiceClient, token string) seeded {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 30*time.Second)
	defer cancel()
	claim := func(req *pb.ClaimRequest) *pb.ClaimResponse {
		t.Helper()
		req.Namespace, req.Provider = "billing", "stripe"
		res, err := c.Claim(ctx, req)
		if err != nil {
			t.Fatalf("Claim(%s): %v", req.GetEventId(), err)
		}
		return res
	}
	move := func(res *pb.ClaimResponse, result string, to ...pb.EventState) {
		t.Helper()
		for _, s := range to {
			req := &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: res.Key, FencingToken: res.FencingToken, LeaseSecret: res.LeaseSecret, To: s}
			if s == pb.EventState_EVENT_STATE_SETTLED {
				req.Result = []byte(result)
			}
			if _, err := c.Transition(ctx, req); err != nil {
				t.Fatalf("Transition(%s, %v): %v", res.Key, s, err)
			}
		}
	}
	processing, settled := pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED

	move(claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: "evt_ui_settled"}, Holder: "pod-a"}), "booked ledger entry 42", processing, settled)

	// pi_ui reaches processing; then the requires_action of a newer attempt
	// arrives before the older attempt's payment_failed: deferred.
	s := seeded{appliedKey: "evt_ui_pi_processing", deferredKey: "evt_ui_pi_requires_action"}
	move(claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: s.appliedKey}, EntityId: "pi_ui", EventType: "payment_intent.processing", Holder: "pod-a"}), "", processing, settled)
	if res := claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: s.deferredKey}, EntityId: "pi_ui", EventType: "payment_intent.requires_action", Holder: "pod-a"}); res.Outcome != pb.Outcome_OUTCOME_DEFERRED {
		t.Fatalf("Claim(%s) outcome = %v, want DEFERRED", s.deferredKey, res.Outcome)
	}

	// Two holders that vanish mid-work, with the shortest lease a test can
	// wait out. Their leases end by the server's clock, the same wall clock
	// as ours: the wait is for that end, which nothing else signals.
	short := durationpb.New(time.Second)
	first := claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: "evt_ui_takeover"}, Holder: "pod-a", Lease: short, Start: true})
	claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: "evt_ui_stuck"}, Holder: "pod-c", Lease: short, Start: true})
	<-time.After(time.Until(first.LeaseExpiresAt.AsTime().Add(10 * time.Millisecond)))
	if res := claim(&pb.ClaimRequest{Key: &pb.ClaimRequest_EventId{EventId: "evt_ui_takeover"}, Holder: "pod-b"}); res.Reason != pb.Reason_REASON_LEASE_EXPIRED {
		t.Fatalf("Claim(evt_ui_takeover) after the lease = %v %v, want ACQUIRED LEASE_EXPIRED", res.Outcome, res.Reason)
	}
	return s
}

// seedClaim claims key in billing/stripe as the principal of token.
func seedClaim(t *testing.T, c pb.ClaimServiceClient, token, key string) *pb.ClaimResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 10*time.Second)
	defer cancel()
	res, err := c.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: key}, Holder: "pod-a"})
	if err != nil {
		t.Fatalf("Claim(%s): %v", key, err)
	}
	return res
}

// chromiumPath finds Debian's chromium; scripts/test-deps.sh installs it,
// and a machine without it fails the test rather than skipping it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: the on-call page's browser test needs it (scripts/test-deps.sh installs Debian's chromium)")
	return ""
}

// newBrowser starts a headless Chromium with its own profile; the page's
// uncaught exceptions fail the test.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root inside its sandbox; as root (CI,
		// containers) the test runs it without one, on a page it serves itself.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Subscribed before the first navigation; read until the test ends.
	thrown := chromedp.Events(ctx, runtime.ExceptionThrown)
	var mu sync.Mutex
	var errs []string
	go func() {
		for ev, err := range thrown {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			mu.Lock()
			errs = append(errs, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Errorf("the page threw: %s", e)
		}
	})
	return ctx
}

// step runs the actions of one step, bounded: generously, for a machine
// that runs every package's tests at once; a passing step takes well under a
// second.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.dataset.state + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v\nthe page (state, text):\n%s", what, err, body)
	}
}

// text is the rendered text of the first element sel selects, at once (the
// steps wait for the page); "(no element)" when there is none.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : "(no element)"; })()`, sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

func requireText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := text(t, ctx, sel); !strings.Contains(got, want) {
		t.Errorf("%s shows %q, want it to contain %q", sel, got, want)
	}
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	if err != nil {
		t.Fatalf("counting %s: %v", sel, err)
	}
	return n
}

// shots keeps the page's screenshots as test artifacts.
type shots struct {
	dir   string
	names []string
}

func newShots(t *testing.T) *shots {
	t.Helper()
	root := os.Getenv("CLAIMD_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "claimd-test-artifacts")
	}
	dir := filepath.Join(root, "on-call")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the on-call page: %s", dir)
	return &shots{dir: dir}
}

func (s *shots) take(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	s.names = append(s.names, name)
}

// done copies the screenshots to docs/img/ when asked to.
func (s *shots) done(t *testing.T) {
	t.Helper()
	if !*updateScreenshots && os.Getenv("CLAIMD_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	img := filepath.Join("..", "..", "docs", "img")
	if err := os.MkdirAll(img, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range s.names {
		b, err := os.ReadFile(filepath.Join(s.dir, name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img, name+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d screenshots to docs/img/", len(s.names))
}
