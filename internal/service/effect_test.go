package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestEffectRecoveredValidation: effect_recovered goes with a SETTLED target
// only; on any other the call is refused with the field and the reason, and
// writes nothing.
func TestEffectRecoveredValidation(t *testing.T) {
	tests := []struct {
		desc     string
		to       pb.EventState
		result   []byte
		wantDesc string
	}{
		{"to PROCESSING", pb.EventState_EVENT_STATE_PROCESSING, nil, "only allowed with to = EVENT_STATE_SETTLED (a settle whose result came from an earlier holder's effect fence), not EVENT_STATE_PROCESSING"},
		{"to VALIDATED", pb.EventState_EVENT_STATE_VALIDATED, nil, "not EVENT_STATE_VALIDATED"},
		{"to FAILED, with a result", pb.EventState_EVENT_STATE_FAILED, []byte("x"), "not EVENT_STATE_FAILED"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			store := &tierstest.CountingStore{Store: embedded(t)}
			svc := newTestService(t, store, clock.NewFake(time.Now()))
			_, err := svc.Transition(context.Background(), &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1",
				FencingToken: 1, LeaseSecret: secret16, To: tc.to, Result: tc.result, EffectRecovered: true})
			code, field, desc := fieldOf(err)
			if code != codes.InvalidArgument || field != "TransitionRequest.effect_recovered" || !strings.Contains(desc, tc.wantDesc) {
				t.Errorf("Transition(effect_recovered, %s) = %v %q %q, want INVALID_ARGUMENT %q containing %q", tc.desc, code, field, desc,
					"TransitionRequest.effect_recovered", tc.wantDesc)
			}
			if n := store.Writes.Load(); n != 0 {
				t.Errorf("Transition(effect_recovered, %s) reached the store %d times; bad input must write nothing", tc.desc, n)
			}
		})
	}
}

// recorded keeps every Request the service recorded.
type recorded struct {
	mu sync.Mutex
	rs []Request
}

func (r *recorded) Record(_ context.Context, req *Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rs = append(r.rs, *req)
}

func (r *recorded) last() Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rs[len(r.rs)-1]
}

// effectLines returns the warn lines of recovered effects in logs.
func effectLines(t *testing.T, logs *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "effect recovered") {
			out = append(out, m)
		}
	}
	return out
}

// TestEffectRecoveredIsCountedOnce: a settle that carries effect_recovered
// and changes the record is a recovered effect (RecoveredEffect, which the
// metrics count) with one warn line naming the delivery; its repeat, and a
// settle without the flag, are not.
func TestEffectRecoveredIsCountedOnce(t *testing.T) {
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	rec := &recorded{}
	svc := New(Config{Store: embedded(t), Registry: reg, Clock: clock.NewFake(time.Now()), Recorder: rec,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	holders := map[string]*pb.ClaimResponse{}
	for _, id := range []string{"evt_recovered", "evt_own"} {
		resp, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: id} }))
		if err != nil || resp.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
			t.Fatalf("Claim(%q) = %v, %v; want ACQUIRED", id, resp.GetOutcome(), err)
		}
		holders[id] = resp
		if _, err := svc.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: id, FencingToken: resp.FencingToken,
			LeaseSecret: resp.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
			t.Fatal(err)
		}
	}
	settle := func(id string, recovered bool) *pb.TransitionRequest {
		h := holders[id]
		return &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: id, FencingToken: h.FencingToken, LeaseSecret: h.LeaseSecret,
			To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("stored by the fence"), EffectRecovered: recovered}
	}
	tests := []struct {
		desc        string
		req         *pb.TransitionRequest
		wantChanged bool
		wantCounted bool
		wantLines   int // effect-recovered warn lines so far
	}{
		{"recovered settle", settle("evt_recovered", true), true, true, 1},
		{"its repeat", settle("evt_recovered", true), false, false, 1},
		{"a settle of the holder's own result", settle("evt_own", false), true, false, 1},
	}
	for _, tc := range tests {
		resp, err := svc.Transition(ctx, tc.req)
		if err != nil || resp.Changed != tc.wantChanged || resp.Record.GetState() != pb.EventState_EVENT_STATE_SETTLED {
			t.Fatalf("%s: Transition() = %v changed %v, %v; want SETTLED changed %v", tc.desc, resp.GetRecord().GetState(), resp.GetChanged(), err, tc.wantChanged)
		}
		r := rec.last()
		if got := r.RecoveredEffect(); got != tc.wantCounted {
			t.Errorf("%s: Request.RecoveredEffect() = %v, want %v (Request %+v)", tc.desc, got, tc.wantCounted, r)
		}
		if got := len(effectLines(t, &logs)); got != tc.wantLines {
			t.Errorf("%s: effect-recovered warn lines = %d, want %d", tc.desc, got, tc.wantLines)
		}
	}
	line := effectLines(t, &logs)[0]
	want := map[string]any{"level": "WARN", "namespace": "billing", "provider": "stripe", "key": "evt_recovered",
		"fencing_token": float64(holders["evt_recovered"].FencingToken)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("effect-recovered line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if strings.Contains(logs.String(), "stored by the fence") {
		t.Errorf("the log carries the stored result:\n%s", logs.String())
	}
}

// TestRecoveredEffect pins which Requests are recovered effects.
func TestRecoveredEffect(t *testing.T) {
	for _, tc := range []struct {
		desc string
		r    Request
		want bool
	}{
		{"a settle that changed the record", Request{Method: "Transition", EffectRecovered: true, Changed: true, To: tiers.StateSettled}, true},
		{"its repeat", Request{Method: "Transition", EffectRecovered: true}, false},
		{"without the flag", Request{Method: "Transition", Changed: true, To: tiers.StateSettled}, false},
		{"failed", Request{Method: "Transition", EffectRecovered: true, Code: codes.Unavailable}, false},
	} {
		if got := tc.r.RecoveredEffect(); got != tc.want {
			t.Errorf("%s: RecoveredEffect() = %v, want %v", tc.desc, got, tc.want)
		}
	}
}
