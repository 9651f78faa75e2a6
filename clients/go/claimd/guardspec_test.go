package claimd_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/claimd/claimd/clients/go/claimd"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// The guard contract's scenarios (clients/guardspec/README.md describes the
// format). Every field is decoded strictly: a field this runner does not
// know fails the test, so the file cannot say more than the runners check.

// specPath is clients/guardspec/scenarios.json, from this package's
// directory (go test runs in it).
var specPath = filepath.Join("..", "..", "guardspec", "scenarios.json")

type guardSpec struct {
	Doc           string            `json:"doc"`
	Constants     specConstants     `json:"constants"`
	Effects       specEffects       `json:"effects"`
	RowCount      int               `json:"row_count"`
	UncoveredRows map[string]string `json:"uncovered_rows"`
	Scenarios     []scenario        `json:"scenarios"`
}

type specConstants struct {
	MaxResultBytes         int `json:"max_result_bytes"`
	MaxFailureTextBytes    int `json:"max_failure_text_bytes"`
	UnavailableRetryAfterS int `json:"unavailable_retry_after_s"`
	SupersededRetryAfterS  int `json:"superseded_retry_after_s"`
	HeartbeatDivisor       int `json:"heartbeat_divisor"`
	HeartbeatFloorMS       int `json:"heartbeat_floor_ms"`
	Retry                  struct {
		MaxAttempts      int `json:"max_attempts"`
		BaseBackoffMS    int `json:"base_backoff_ms"`
		MaxBackoffMS     int `json:"max_backoff_ms"`
		Multiplier       int `json:"multiplier"`
		TotalTimeoutMS   int `json:"total_timeout_ms"`
		AttemptTimeoutMS int `json:"attempt_timeout_ms"`
	} `json:"retry"`
}

// specEffects is the effect fence's part of the contract.
type specEffects struct {
	Doc          string                    `json:"doc"`
	Schema       map[claimd.Dialect]string `json:"schema"`
	LedgerSchema string                    `json:"ledger_schema"`
	EffectKeys   []struct {
		Namespace string `json:"namespace"`
		Provider  string `json:"provider"`
		Key       string `json:"key"`
		Step      string `json:"step"`
		EffectKey string `json:"effect_key"`
	} `json:"effect_keys"`
}

type scenario struct {
	Name        string        `json:"name"`
	Row         int           `json:"row"`
	Doc         string        `json:"doc"`
	Unreachable bool          `json:"unreachable"`
	Arrange     []arrangeStep `json:"arrange"`
	Deliveries  []delivery    `json:"deliveries"`
	HandlerRuns *int          `json:"handler_runs"`
	Effect      bool          `json:"effect"`
	// Pending names the languages whose guard does not implement the
	// scenario's rule yet, with why; this runner skips one pending for "go".
	Pending map[string]string `json:"pending"`
}

type arrangeStep struct {
	Op      string    `json:"op"`
	LeaseMS int64     `json:"lease_ms"`
	To      string    `json:"to"`
	Result  *specBody `json:"result"`
}

type delivery struct {
	Request *specRequest `json:"request"`
	Handler *specHandler `json:"handler"`
	Faults  []specFault  `json:"faults"`
	Expect  *specExpect  `json:"expect"`
}

type specRequest struct {
	Provider  string            `json:"provider"`
	Body      *specText         `json:"body"`
	Headers   map[string]string `json:"headers"`
	LeaseMS   int64             `json:"lease_ms"`
	WaitMS    int64             `json:"wait_ms"`
	EventID   string            `json:"event_id"`
	EntityID  string            `json:"entity_id"`
	EventType string            `json:"event_type"`
}

type specHandler struct {
	Returns      *specValue  `json:"returns"`
	Raises       *specRaise  `json:"raises"`
	Effect       *specEffect `json:"effect"`
	SettleItself *specBody   `json:"settle_itself"`
	FailItself   *specBody   `json:"fail_itself"`
	TakenOver    bool        `json:"taken_over"`
	OutliveLease bool        `json:"outlive_lease"`
}

// specEffect is a handler's effect on the runner's database.
type specEffect struct {
	Result *specValue `json:"result"`
	Raises *struct {
		Message specText `json:"message"`
	} `json:"raises"`
}

type specRaise struct {
	Message   specText `json:"message"`
	Permanent bool     `json:"permanent"`
}

// specValue is what a handler returns. A Go handler returns bytes, so a
// JSON value is returned as its compact text: what the other guards'
// encoders must write for it.
type specValue struct {
	Text *specText       `json:"text"`
	B64  *string         `json:"b64"`
	JSON json.RawMessage `json:"json"`
	None bool            `json:"none"`
}

type specFault struct {
	Call         string `json:"call"`
	Code         string `json:"code"`
	Reason       string `json:"reason"`
	RetryDelayMS int64  `json:"retry_delay_ms"`
}

type specExpect struct {
	Status     *int            `json:"status"`
	RetryAfter *specRetryAfter `json:"retry_after"`
	Body       *specBody       `json:"body"`
	Ran        *bool           `json:"ran"`
	Claim      *specClaim      `json:"claim"`
	Record     *specRecord     `json:"record"`
	Calls      []string        `json:"calls"`
	Effect     *specExpectFx   `json:"effect"`
}

// specExpectFx is what an effect scenario's delivery left in the runner's
// database. Fence is raw: null (no row) differs from absent (not checked).
type specExpectFx struct {
	Done       *bool           `json:"done"`
	LedgerRows *int            `json:"ledger_rows"`
	Fence      json.RawMessage `json:"fence"`
}

type specFence struct {
	FencingToken *uint64  `json:"fencing_token"`
	Result       specBody `json:"result"`
}

type specClaim struct {
	Outcome      string  `json:"outcome"`
	Reason       string  `json:"reason"`
	State        string  `json:"state"`
	FencingToken *uint64 `json:"fencing_token"`
}

type specRecord struct {
	State        string    `json:"state"`
	Released     *bool     `json:"released"`
	FencingToken *uint64   `json:"fencing_token"`
	Result       *specBody `json:"result"`
}

// specText is a string, or {"prefix", "repeat", "times"} for long ones.
type specText string

func (t *specText) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = specText(s)
		return nil
	}
	var r struct {
		Prefix string `json:"prefix"`
		Repeat string `json:"repeat"`
		Times  int    `json:"times"`
	}
	if err := strictDecode(b, &r); err != nil {
		return fmt.Errorf("text: want a string or {prefix, repeat, times}: %w", err)
	}
	if r.Repeat == "" || r.Times <= 0 {
		return fmt.Errorf("text: repeat and a positive times are required")
	}
	*t = specText(r.Prefix + strings.Repeat(r.Repeat, r.Times))
	return nil
}

// specBody is {"text": Text} or {"b64": "..."}: exact bytes.
type specBody []byte

func (sb *specBody) UnmarshalJSON(b []byte) error {
	var v struct {
		Text *specText `json:"text"`
		B64  *string   `json:"b64"`
	}
	if err := strictDecode(b, &v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	switch {
	case (v.Text == nil) == (v.B64 == nil):
		return errors.New("body: want exactly one of text and b64")
	case v.Text != nil:
		*sb = []byte(*v.Text)
	default:
		raw, err := base64.StdEncoding.DecodeString(*v.B64)
		if err != nil {
			return fmt.Errorf("body: b64: %w", err)
		}
		*sb = raw
	}
	return nil
}

// specRetryAfter is a number of seconds or {"min", "max"}.
type specRetryAfter struct{ Min, Max int }

func (r *specRetryAfter) UnmarshalJSON(b []byte) error {
	var n int
	if json.Unmarshal(b, &n) == nil {
		r.Min, r.Max = n, n
		return nil
	}
	var v struct {
		Min *int `json:"min"`
		Max *int `json:"max"`
	}
	if err := strictDecode(b, &v); err != nil || v.Min == nil || v.Max == nil {
		return fmt.Errorf("retry_after: want a number or {min, max} (%v)", err)
	}
	r.Min, r.Max = *v.Min, *v.Max
	return nil
}

func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// loadSpec reads and checks the scenario file: strict fields, and the
// required ones present.
func loadSpec(t *testing.T) guardSpec {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec guardSpec
	if err := strictDecode(raw, &spec); err != nil {
		t.Fatalf("%s: %v", specPath, err)
	}
	seen := map[string]bool{}
	for i, sc := range spec.Scenarios {
		where := fmt.Sprintf("%s: scenario %d (%q)", specPath, i, sc.Name)
		switch {
		case sc.Name == "" || seen[sc.Name]:
			t.Fatalf("%s: a unique name is required", where)
		case sc.Row < 1 || sc.Row > spec.RowCount:
			t.Fatalf("%s: row %d is not a row of GUARD.md (1..%d)", where, sc.Row, spec.RowCount)
		case len(sc.Deliveries) == 0 || sc.HandlerRuns == nil:
			t.Fatalf("%s: deliveries and handler_runs are required", where)
		}
		seen[sc.Name] = true
		for j, d := range sc.Deliveries {
			e := d.Expect
			if e == nil || e.Status == nil || e.Body == nil || e.Ran == nil {
				t.Fatalf("%s: delivery %d: expect with status, body and ran is required", where, j+1)
			}
			if r := d.Request; r != nil && r.Body != nil && r.EventID != "" {
				t.Fatalf("%s: delivery %d: event_id and body exclude each other", where, j+1)
			}
			if h := d.Handler; h != nil && count(h.Returns != nil, h.Raises != nil, h.Effect != nil) != 1 {
				t.Fatalf("%s: delivery %d: a handler needs exactly one of returns, raises and effect", where, j+1)
			}
			if h := d.Handler; !sc.Effect && (h != nil && h.Effect != nil || e.Effect != nil) {
				t.Fatalf("%s: delivery %d: an effect handler or expectation needs \"effect\": true", where, j+1)
			}
		}
	}
	for i, step := range spec.Scenarios {
		for _, a := range step.Arrange {
			if a.Op == "fence" && !step.Effect {
				t.Fatalf("%s: scenario %d: arrange op fence needs \"effect\": true", specPath, i)
			}
		}
	}
	return spec
}

// count is how many of bs are true.
func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// TestGuardSpecCoverage: every row of the contract has a scenario, or a
// reason why none can express it.
func TestGuardSpecCoverage(t *testing.T) {
	spec := loadSpec(t)
	covered := map[int]bool{}
	for _, sc := range spec.Scenarios {
		covered[sc.Row] = true
	}
	for row := 1; row <= spec.RowCount; row++ {
		_, excused := spec.UncoveredRows[strconv.Itoa(row)]
		if covered[row] == excused {
			t.Errorf("GUARD.md row %d: covered by a scenario %v, listed in uncovered_rows %v; want exactly one", row, covered[row], excused)
		}
	}
}

// TestGuardSpecConstants: this client's numbers are the contract's.
func TestGuardSpecConstants(t *testing.T) {
	c := loadSpec(t).Constants
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name      string
		got, want any
	}{
		{"MaxResultBytes", claimd.MaxResultBytes, c.MaxResultBytes},
		{"MaxFailureText", claimd.MaxFailureText, c.MaxFailureTextBytes},
		{"UnavailableRetryAfter", claimd.UnavailableRetryAfter, time.Duration(c.UnavailableRetryAfterS) * time.Second},
		{"SupersededRetryAfter", claimd.SupersededRetryAfter, time.Duration(c.SupersededRetryAfterS) * time.Second},
		{"DefaultCallTimeout", claimd.DefaultCallTimeout, ms(c.Retry.AttemptTimeoutMS)},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("claimd.%s = %v, want %v (clients/guardspec constants)", tt.name, tt.got, tt.want)
		}
	}
	// The retry policy's defaults and the heartbeat are internal: see
	// TestGuardSpecInternalConstants.
}

// TestGuardSpec runs every scenario against the suite's claimd.
func TestGuardSpec(t *testing.T) {
	t.Parallel()
	spec := loadSpec(t)
	for _, sc := range spec.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			if why, ok := sc.Pending["go"]; ok {
				t.Skipf("pending for Go (guardspec README, pending): %s", why)
			}
			if !sc.Effect {
				runScenario(t, sc, nil)
				return
			}
			for _, d := range effectDialects {
				t.Run(string(d), func(t *testing.T) {
					t.Parallel()
					runScenario(t, sc, newSpecDB(t, d, spec.Effects.LedgerSchema))
				})
			}
		})
	}
}

// TestGuardSpecEffects: this client's fence DDL and effect keys are the
// contract's.
func TestGuardSpecEffects(t *testing.T) {
	fx := loadSpec(t).Effects
	for _, d := range []claimd.Dialect{claimd.DialectPostgres, claimd.DialectSQLite, claimd.DialectMySQL} {
		if got, want := claimd.EffectsSchema(d), fx.Schema[d]; got != want || want == "" {
			t.Errorf("EffectsSchema(%s) =\n%s\nwant (effects.schema):\n%s", d, got, want)
		}
	}
	if len(fx.Schema) != 3 {
		t.Errorf("effects.schema has %d dialects, want postgres, sqlite and mysql", len(fx.Schema))
	}
	if len(fx.EffectKeys) == 0 {
		t.Error("effects.effect_keys is empty")
	}
	for _, v := range fx.EffectKeys {
		c := claimd.Claim{ClaimResponse: &pb.ClaimResponse{Key: v.Key}, Namespace: v.Namespace, Provider: v.Provider}
		if got := claimd.EffectKey(c, v.Step); got != v.EffectKey {
			t.Errorf("EffectKey(%s/%s/%s, %q) = %s, want %s", v.Namespace, v.Provider, v.Key, v.Step, got, v.EffectKey)
		}
	}
}

// specDB is the runner's database of an effect scenario.
type specDB struct {
	dialect claimd.Dialect
	db      *sql.DB
}

// newSpecDB opens a new database of dialect d with the runners' ledger
// table. claimd_effects is left to the guard: the first effect creates it.
func newSpecDB(t *testing.T, d claimd.Dialect, ledgerSchema string) *specDB {
	db := openEffectDB(t, d)
	if _, err := db.Exec(ledgerSchema); err != nil {
		t.Fatalf("effects.ledger_schema on %s: %v", d, err)
	}
	return &specDB{dialect: d, db: db}
}

// ledger appends the runner's ledger row for key, as writer.
func (s *specDB) ledger(ctx context.Context, tx claimd.EffectTx, key, writer string) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO guardspec_ledger (namespace, key, writer) VALUES (%s, %s, %s)",
		ph(s.dialect, 1), ph(s.dialect, 2), ph(s.dialect, 3)), namespace, key, writer)
	return err
}

// ledgerRows counts key's ledger rows.
func (s *specDB) ledgerRows(ctx context.Context, key string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM guardspec_ledger WHERE namespace = %s AND key = %s",
		ph(s.dialect, 1), ph(s.dialect, 2)), namespace, key).Scan(&n)
	return n, err
}

// fence is arrange op fence: the other holder commits its effect (a ledger
// row and the fence row with its token and result) without the guard, then
// vanishes.
func (s *specDB) fence(ctx context.Context, l claimd.Lease, result []byte) error {
	if _, err := s.db.ExecContext(ctx, claimd.EffectsSchema(s.dialect)); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.ledger(ctx, tx, l.Key, "guardspec-other"); err != nil {
		return err
	}
	p := func(n int) string { return ph(s.dialect, n) }
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO claimd_effects (namespace, provider, key, fencing_token, result) VALUES (%s, %s, %s, %s, %s)",
		p(1), p(2), p(3), p(4), p(5)), l.Namespace, l.Provider, l.Key, int64(l.FencingToken), result); err != nil {
		return err
	}
	return tx.Commit()
}

// faultSet fails the named calls of the guard's client without sending
// them, and logs every write (and the handler's run) of a delivery.
type faultSet struct {
	mu     sync.Mutex
	faults []specFault
	calls  []string
}

func (f *faultSet) set(faults []specFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = faults
	f.calls = nil
}

// log records a call, or "handler" when the handler runs.
func (f *faultSet) log(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

// logged is what log recorded since set.
func (f *faultSet) logged() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *faultSet) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if name := callName(req); name != "" {
		f.log(name)
	}
	f.mu.Lock()
	faults := f.faults
	f.mu.Unlock()
	for _, fl := range faults {
		if callName(req) == fl.Call {
			return fl.status()
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// callName names a request as the scenarios' faults do.
func callName(req any) string {
	switch r := req.(type) {
	case *pb.ClaimRequest:
		return "claim"
	case *pb.RenewRequest:
		return "renew"
	case *pb.ReleaseRequest:
		return "release"
	case *pb.TransitionRequest:
		switch r.GetTo() {
		case claimd.StateProcessing:
			return "start"
		case claimd.StateSettled:
			if r.GetEffectRecovered() {
				return "settle_recovered"
			}
			return "settle"
		case claimd.StateFailed:
			return "fail"
		}
	}
	return ""
}

func (fl specFault) status() error {
	var code codes.Code
	if err := code.UnmarshalJSON([]byte(strconv.Quote(fl.Code))); err != nil {
		return fmt.Errorf("guardspec: fault code %q: %v", fl.Code, err)
	}
	st := status.New(code, "injected by guardspec")
	var details []protoadapt.MessageV1
	if fl.Reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: fl.Reason, Domain: claimd.ErrorDomain})
	}
	if fl.RetryDelayMS > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(fl.RetryDelayMS) * time.Millisecond)})
	}
	for _, d := range details {
		var err error
		if st, err = st.WithDetails(d); err != nil {
			return err
		}
	}
	return st.Err()
}

// runScenario runs sc; db is the runner's database of an effect scenario
// (nil otherwise).
func runScenario(t *testing.T, sc scenario, db *specDB) {
	ctx := ctxT(t)
	id := eventID(t)
	plain := dial(t, shared.Addr) // the other holder, and the reader of records
	faults := &faultSet{}
	target, opts := shared.Addr, []claimd.Option{claimd.WithLogger(quiet), claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(faults.intercept))}
	if sc.Unreachable {
		target, opts = closedPort(t), append(opts, claimd.WithLazyConnect())
	}
	// The guard's client keeps the default retry policy: the contract's.
	g, err := claimd.Dial(ctx, target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	var other claimd.Lease
	for i, step := range sc.Arrange {
		if err := arrange(ctx, plain, id, step, &other, db); err != nil {
			t.Fatalf("arrange step %d (%s): %v", i+1, step.Op, err)
		}
	}

	var runs atomic.Int64
	for i, d := range sc.Deliveries {
		req := claimRequest(id, d.Request)
		faults.set(d.Faults)
		var ran, done atomic.Bool
		out := g.Guard(ctx, req, func(fnCtx context.Context, cl claimd.Claim) ([]byte, error) {
			runs.Add(1)
			ran.Store(true)
			faults.log("handler")
			if h := d.Handler; h != nil && h.Effect != nil {
				return handleEffect(t, fnCtx, db, cl, h.Effect, &done)
			}
			return handle(t, ctx, fnCtx, plain, req, cl, d.Handler)
		})
		calls := faults.logged()
		faults.set(nil)
		where := fmt.Sprintf("delivery %d", i+1)
		if want := d.Expect.Calls; want != nil && !slices.Equal(calls, want) {
			t.Errorf("%s: the guard's calls = %q, want %q", where, calls, want)
		}
		checkDelivery(t, ctx, plain, where, id, req, out, ran.Load(), d.Expect)
		if e := d.Expect.Effect; e != nil {
			checkEffect(t, ctx, db, where, req.Provider, id, out, done.Load(), e)
		}
	}
	if got := int(runs.Load()); got != *sc.HandlerRuns {
		t.Errorf("handler runs over %d deliveries = %d, want %d", len(sc.Deliveries), got, *sc.HandlerRuns)
	}
}

func arrange(ctx context.Context, plain *claimd.Client, id string, step arrangeStep, other *claimd.Lease, db *specDB) error {
	switch step.Op {
	case "claim":
		cl, err := plain.Claim(ctx, claimd.ClaimRequest{
			Namespace: namespace, Provider: "stripe", EventID: id,
			Lease: time.Duration(step.LeaseMS) * time.Millisecond, Holder: "guardspec-other",
		})
		if err != nil {
			return err
		}
		if !cl.Acquired() {
			return fmt.Errorf("claim outcome %v, want ACQUIRED", cl.GetOutcome())
		}
		*other = cl.Lease()
	case "transition":
		to, ok := pb.EventState_value["EVENT_STATE_"+step.To]
		if !ok {
			return fmt.Errorf("unknown state %q", step.To)
		}
		var result []byte
		if step.Result != nil {
			result = *step.Result
		}
		_, _, err := plain.Transition(ctx, claimd.TransitionRequest{Lease: *other, To: pb.EventState(to), Result: result})
		return err
	case "release":
		_, err := plain.Release(ctx, *other)
		return err
	case "fence":
		if step.Result == nil {
			return errors.New("fence needs a result")
		}
		return db.fence(ctx, *other, *step.Result)
	default:
		return fmt.Errorf("unknown op %q", step.Op)
	}
	return nil
}

func claimRequest(id string, r *specRequest) claimd.ClaimRequest {
	req := claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id}
	if r == nil {
		return req
	}
	if r.Provider != "" {
		req.Provider = r.Provider
	}
	if r.EventID != "" {
		req.EventID = strings.ReplaceAll(r.EventID, "{event_id}", id)
	}
	req.EntityID = strings.ReplaceAll(r.EntityID, "{event_id}", id)
	req.EventType = r.EventType
	if r.Body != nil {
		req.EventID = ""
		req.Delivery = &claimd.Delivery{Headers: r.Headers, Body: []byte(strings.ReplaceAll(string(*r.Body), "{event_id}", id))}
	}
	req.Lease = time.Duration(r.LeaseMS) * time.Millisecond
	req.Wait = time.Duration(r.WaitMS) * time.Millisecond
	return req
}

// handle is the scenario's handler. What goes wrong inside it is a test
// error, reported at once; the handler then fails retryably.
func handle(t *testing.T, ctx, fnCtx context.Context, plain *claimd.Client, req claimd.ClaimRequest, cl claimd.Claim, h *specHandler) ([]byte, error) {
	if h == nil {
		return nil, nil
	}
	fail := func(format string, args ...any) ([]byte, error) {
		err := fmt.Errorf("handler: "+format, args...)
		t.Error(err)
		return nil, err
	}
	for to, result := range map[pb.EventState]*specBody{claimd.StateSettled: h.SettleItself, claimd.StateFailed: h.FailItself} {
		if result == nil {
			continue
		}
		if _, _, err := plain.Transition(ctx, claimd.TransitionRequest{Lease: cl.Lease(), To: to, Result: *result}); err != nil {
			return fail("Transition(%v) itself: %v", to, err)
		}
	}
	if h.TakenOver {
		if _, err := plain.Release(ctx, cl.Lease()); err != nil {
			return fail("Release: %v", err)
		}
		taker := req
		taker.Holder, taker.Lease, taker.Wait = "guardspec-taker", 0, 0
		if tc, err := plain.Claim(ctx, taker); err != nil || !tc.Acquired() {
			return fail("the taker's Claim = %v, %v; want ACQUIRED", tc.GetOutcome(), err)
		}
		select {
		case <-fnCtx.Done():
		case <-time.After(10 * time.Second):
			return fail("not cancelled within 10s of the takeover")
		}
	}
	if h.OutliveLease {
		if err := outliveLease(ctx, plain, req, cl); err != nil {
			return fail("%v", err)
		}
	}
	if r := h.Raises; r != nil {
		err := errors.New(string(r.Message))
		if r.Permanent {
			err = claimd.Permanent(err)
		}
		return nil, err
	}
	b, err := h.Returns.bytes()
	if err != nil {
		return fail("%v", err)
	}
	return b, nil
}

// bytes is what a Go handler returns for v.
func (v *specValue) bytes() ([]byte, error) {
	switch {
	case v.Text != nil:
		return []byte(*v.Text), nil
	case v.B64 != nil:
		return base64.StdEncoding.DecodeString(*v.B64)
	case v.JSON != nil:
		var buf bytes.Buffer
		if err := json.Compact(&buf, v.JSON); err != nil {
			return nil, fmt.Errorf("json: %v", err)
		}
		return buf.Bytes(), nil
	}
	return nil, nil
}

// handleEffect is a handler with an effect: unless the effect is done, it
// writes one ledger row, sets the effect's result and raises inside it when
// told to; then it returns the effect's result. done reports whether the
// effect found a committed fence.
func handleEffect(t *testing.T, fnCtx context.Context, db *specDB, cl claimd.Claim, h *specEffect, done *atomic.Bool) ([]byte, error) {
	var result []byte
	if h.Result != nil {
		var err error
		if result, err = h.Result.bytes(); err != nil {
			t.Error(err)
			return nil, err
		}
	}
	fx, err := claimd.Effect(fnCtx, db.db, func(ctx context.Context, tx claimd.EffectTx, fx *claimd.Fx) error {
		if err := db.ledger(ctx, tx, cl.GetKey(), "guardspec"); err != nil {
			t.Errorf("handler: ledger insert: %v", err)
			return err
		}
		if h.Result != nil {
			fx.Result = result
		}
		if h.Raises != nil {
			return errors.New(string(h.Raises.Message))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	done.Store(fx.Done)
	return fx.Result, nil
}

// checkEffect compares the runner's database after a delivery with e.
func checkEffect(t *testing.T, ctx context.Context, db *specDB, what, provider, id string, out claimd.Outcome, done bool, e *specExpectFx) {
	t.Helper()
	if e.Done != nil {
		if done != *e.Done {
			t.Errorf("%s: effect done %v, want %v", what, done, *e.Done)
		}
		if got := out.Effect != nil && out.Effect.Done; got != *e.Done {
			t.Errorf("%s: Outcome.Effect %+v, want done %v", what, out.Effect, *e.Done)
		}
	}
	if e.LedgerRows != nil {
		n, err := db.ledgerRows(ctx, id)
		if err != nil || n != *e.LedgerRows {
			t.Errorf("%s: ledger rows %d (%v), want %d", what, n, err, *e.LedgerRows)
		}
	}
	if e.Fence == nil {
		return
	}
	got, err := readFence(ctx, db.db, db.dialect, namespace, provider, id)
	if err != nil {
		t.Errorf("%s: reading the fence: %v", what, err)
		return
	}
	if string(e.Fence) == "null" {
		if got != nil {
			t.Errorf("%s: fence token %d result %s, want no fence", what, got.Token, clipBytes(got.Result))
		}
		return
	}
	var want specFence
	if err := strictDecode(e.Fence, &want); err != nil {
		t.Fatalf("%s: expect.effect.fence: %v", what, err)
	}
	switch {
	case got == nil:
		t.Errorf("%s: no fence, want token %v result %s", what, want.FencingToken, clipBytes(want.Result))
	case want.FencingToken != nil && got.Token != *want.FencingToken:
		t.Errorf("%s: fence token %d, want %d", what, got.Token, *want.FencingToken)
	case want.Result != nil && !bytes.Equal(got.Result, want.Result):
		t.Errorf("%s: fence result %s, want %s", what, clipBytes(got.Result), clipBytes(want.Result))
	}
}

// outliveLease works until claimd's record shows a renewal and the lease
// the claim was granted has passed, then checks that a competing claim
// still meets a live lease. Polling claimd is the observable condition; the
// interval is not synchronisation.
func outliveLease(ctx context.Context, plain *claimd.Client, req claimd.ClaimRequest, cl claimd.Claim) error {
	first := cl.GetLeaseExpiresAt().AsTime()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := plain.Get(ctx, claimd.Ref{Namespace: req.Namespace, Provider: req.Provider, Key: cl.GetKey()})
		if err != nil {
			return err
		}
		if rec.GetLeaseExpiresAt().AsTime().After(first) && rec.GetUpdatedAt().AsTime().After(first) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no renewal past the first lease (%v) within 10s: %v", first, rec)
		}
		time.Sleep(50 * time.Millisecond)
	}
	competing := req
	competing.Holder, competing.Lease, competing.Wait = "guardspec-competitor", 0, 0
	o, err := plain.Claim(ctx, competing)
	if err != nil || !o.InProgress() {
		return fmt.Errorf("competing Claim past the first lease = %v, %v; want IN_PROGRESS", o.GetOutcome(), err)
	}
	return nil
}

func checkDelivery(t *testing.T, ctx context.Context, plain *claimd.Client, what, id string, req claimd.ClaimRequest, out claimd.Outcome, ran bool, e *specExpect) {
	t.Helper()
	w := httptest.NewRecorder()
	out.Respond(w)
	if w.Code != *e.Status {
		t.Errorf("%s: status %d, want %d (disposition %v, err %v)", what, w.Code, *e.Status, out.Disposition, out.Err)
	}
	ra := w.Header().Get("Retry-After")
	switch {
	case e.RetryAfter == nil && ra != "":
		t.Errorf("%s: Retry-After %q, want none", what, ra)
	case e.RetryAfter != nil:
		n, err := strconv.Atoi(ra)
		if err != nil || n < e.RetryAfter.Min || n > e.RetryAfter.Max {
			t.Errorf("%s: Retry-After %q, want %d..%d", what, ra, e.RetryAfter.Min, e.RetryAfter.Max)
		}
	}
	if got, want := w.Body.Bytes(), []byte(*e.Body); !bytes.Equal(got, want) {
		t.Errorf("%s: body %s, want %s", what, clipBytes(got), clipBytes(want))
	}
	if ran != *e.Ran || out.Ran != ran {
		t.Errorf("%s: handler ran %v (Outcome.Ran %v), want %v", what, ran, out.Ran, *e.Ran)
	}
	if c := e.Claim; c != nil {
		got := out.Claim
		if got.ClaimResponse == nil {
			t.Errorf("%s: no claim answer, want %+v", what, *c)
		} else {
			checkEnum(t, what+": claim outcome", got.GetOutcome().String(), "OUTCOME_", c.Outcome)
			checkEnum(t, what+": claim reason", got.GetReason().String(), "REASON_", c.Reason)
			checkEnum(t, what+": claim state", got.GetState().String(), "EVENT_STATE_", c.State)
			if c.FencingToken != nil && got.GetFencingToken() != *c.FencingToken {
				t.Errorf("%s: claim fencing token %d, want %d", what, got.GetFencingToken(), *c.FencingToken)
			}
		}
	}
	if r := e.Record; r != nil {
		rec, err := plain.Get(ctx, claimd.Ref{Namespace: namespace, Provider: req.Provider, Key: id})
		if err != nil {
			t.Errorf("%s: Get(%q) = %v", what, id, err)
			return
		}
		checkEnum(t, what+": record state", rec.GetState().String(), "EVENT_STATE_", r.State)
		if r.Released != nil && rec.GetReleased() != *r.Released {
			t.Errorf("%s: record released %v, want %v", what, rec.GetReleased(), *r.Released)
		}
		if r.FencingToken != nil && rec.GetFencingToken() != *r.FencingToken {
			t.Errorf("%s: record fencing token %d, want %d", what, rec.GetFencingToken(), *r.FencingToken)
		}
		if r.Result != nil && !bytes.Equal(rec.GetResult(), *r.Result) {
			t.Errorf("%s: record result %s, want %s", what, clipBytes(rec.GetResult()), clipBytes(*r.Result))
		}
	}
}

// checkEnum compares a generated enum's name with the scenario's, which
// leaves out the prefix; an empty want checks nothing.
func checkEnum(t *testing.T, what, got, prefix, want string) {
	t.Helper()
	if want != "" && got != prefix+want {
		t.Errorf("%s = %s, want %s%s", what, got, prefix, want)
	}
}

// clipBytes quotes b for a failure message, clipped: results reach 64 KiB.
func clipBytes(b []byte) string {
	if len(b) <= 80 {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%q… (%d bytes)", b[:80], len(b))
}
