package chaos

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Builders of synthetic calls on key "k"; times are in milliseconds.
const ms = int64(1e6)

func claimOp(client int, attempt string, t0, t1 int64) Op {
	return Op{Client: client, Key: "k", Replica: "r0", Kind: KindClaim, AttemptID: attempt, Invoke: t0 * ms, Complete: t1 * ms}
}

func acquired(o Op, token uint64) Op {
	o.Outcome, o.AckToken, o.AckHolder, o.Reason = pb.Outcome_OUTCOME_ACQUIRED, token, o.AttemptID, pb.Reason_REASON_NEW
	o.AckState = received
	return o
}

// inProgress is an IN_PROGRESS naming holder in state RECEIVED (inState
// names another state).
func inProgress(o Op, holder string) Op { return inState(o, holder, received) }

func inState(o Op, holder string, state pb.EventState) Op {
	o.Outcome, o.AckHolder, o.AckState = pb.Outcome_OUTCOME_IN_PROGRESS, holder, state
	if holder == "" {
		o.AckState = pb.EventState_EVENT_STATE_UNSPECIFIED // a marker's: no record
	}
	return o
}

func duplicate(o Op, result string) Op {
	o.Outcome, o.AckResult, o.AckHolder, o.AckState = pb.Outcome_OUTCOME_DUPLICATE, result, "x", settledSt
	return o
}

func failed(o Op, c codes.Code) Op {
	o.Code = c
	return o
}

func transitionOp(client int, token uint64, to pb.EventState, result string, t0, t1 int64) Op {
	o := Op{Client: client, Key: "k", Replica: "r0", Kind: KindTransition, Token: token, To: to, Result: result, Invoke: t0 * ms, Complete: t1 * ms}
	o.AckToken, o.AckState, o.Changed = token, to, true
	if terminal(to) {
		o.AckResult = result
	}
	return o
}

func releaseOp(client int, token uint64, t0, t1 int64) Op {
	return Op{Client: client, Key: "k", Replica: "r0", Kind: KindRelease, Token: token, Invoke: t0 * ms, Complete: t1 * ms, AckToken: token, Released: true}
}

func probe(replica, result string, t0 int64) Op {
	o := duplicate(claimOp(99, "probe-"+replica, t0, t0+1), result)
	o.Probe, o.Replica = true, replica
	return o
}

const (
	received   = pb.EventState_EVENT_STATE_RECEIVED
	processing = pb.EventState_EVENT_STATE_PROCESSING
	settledSt  = pb.EventState_EVENT_STATE_SETTLED
)

// happy is one key's clean lifecycle: c1 wins, c2 loses and sees DUPLICATE.
func happy() []Op {
	return []Op{
		acquired(claimOp(1, "a1", 0, 2), 1),
		inProgress(claimOp(2, "a2", 1, 3), "a1"),
		transitionOp(1, 1, processing, "", 3, 4),
		transitionOp(1, 1, settledSt, "r1", 5, 6),
		duplicate(claimOp(2, "a3", 7, 8), "r1"),
		probe("r0", "r1", 20),
		probe("r1", "r1", 21),
	}
}

func grantsOf(pairs ...any) []Grant {
	var g []Grant
	for i := 0; i < len(pairs); i += 3 {
		g = append(g, Grant{Key: "k", Holder: pairs[i].(string), Token: uint64(pairs[i+1].(int)), At: int64(pairs[i+2].(int)) * ms})
	}
	return g
}

func TestCheck(t *testing.T) {
	tests := []struct {
		desc   string
		ops    []Op
		grants []Grant
		want   []string // the checks that must fail, sorted; nil: none
	}{
		{desc: "clean lifecycle", ops: happy(), grants: grantsOf("a1", 1, 1)},
		{
			desc: "release hands the key over",
			ops: []Op{
				acquired(claimOp(1, "a1", 0, 2), 1),
				releaseOp(1, 1, 3, 4),
				func() Op { o := acquired(claimOp(2, "a2", 5, 6), 2); o.Reason = pb.Reason_REASON_RELEASED; return o }(),
				transitionOp(2, 2, processing, "", 7, 8),
				transitionOp(2, 2, settledSt, "r2", 9, 10),
				probe("r0", "r2", 20),
			},
			grants: grantsOf("a1", 1, 1, "a2", 2, 5),
		},
		{
			desc: "a failed claim that was granted, then recognised by its retry",
			ops: []Op{
				failed(claimOp(1, "a1", 0, 1), codes.DeadlineExceeded),
				acquired(claimOp(1, "a1", 5, 6), 1),
				transitionOp(1, 1, processing, "", 7, 8),
				transitionOp(1, 1, settledSt, "r1", 9, 10),
				probe("r0", "r1", 20),
			},
			grants: grantsOf("a1", 1, 0),
		},
		{
			desc: "IN_PROGRESS from a pending marker (no holder) on a settled key",
			ops:  append(happy(), inProgress(claimOp(3, "a4", 12, 13), "")),
			want: []string{CheckHolder},
		},
		{
			// Issue 34: the owner's Transition(→PROCESSING) timed out after
			// it committed; a claim read PROCESSING from the durable tier,
			// and a later one was told RECEIVED from the fast tier's copy.
			desc: "an IN_PROGRESS whose state went back in time",
			ops: []Op{
				acquired(claimOp(1, "a1", 0, 2), 1),
				failed(transitionOp(1, 1, processing, "", 3, 4), codes.DeadlineExceeded),
				inState(claimOp(2, "a2", 5, 6), "a1", processing),
				inState(claimOp(3, "a3", 7, 8), "a1", received),
			},
			grants: grantsOf("a1", 1, 1),
			want:   []string{CheckLinearizable},
		},
		{
			desc: "the owner's repeated ACQUIRED with the state its transition left",
			ops: []Op{
				acquired(claimOp(1, "a1", 0, 2), 1),
				failed(transitionOp(1, 1, processing, "", 3, 4), codes.DeadlineExceeded),
				func() Op { o := acquired(claimOp(1, "a1", 5, 6), 1); o.AckState = processing; return o }(),
				inState(claimOp(2, "a2", 7, 8), "a1", processing),
			},
			grants: grantsOf("a1", 1, 1),
		},
		{
			desc: "the owner's repeated ACQUIRED with a state older than one already answered",
			ops: []Op{
				acquired(claimOp(1, "a1", 0, 2), 1),
				failed(transitionOp(1, 1, processing, "", 3, 4), codes.DeadlineExceeded),
				inState(claimOp(2, "a2", 5, 6), "a1", processing),
				acquired(claimOp(1, "a1", 7, 8), 1),
			},
			grants: grantsOf("a1", 1, 1),
			want:   []string{CheckLinearizable},
		},
		{
			desc: "a claim that starts in PROCESSING",
			ops: []Op{
				func() Op { o := acquired(claimOp(1, "a1", 0, 2), 1); o.Start, o.AckState = true, processing; return o }(),
				inState(claimOp(2, "a2", 3, 4), "a1", processing),
				transitionOp(1, 1, settledSt, "r1", 5, 6),
				duplicate(claimOp(2, "a3", 7, 8), "r1"),
			},
			grants: grantsOf("a1", 1, 1),
		},
		{
			desc:   "two owners at once",
			ops:    append(happy()[:1], acquired(claimOp(2, "a2", 1, 3), 1)),
			grants: grantsOf("a1", 1, 0),
			want:   []string{CheckLinearizable, CheckOwnership},
		},
		{
			desc: "settled twice with different results",
			ops: func() []Op {
				o := happy()
				return append(o, transitionOp(1, 1, settledSt, "other", 9, 10))
			}(),
			grants: grantsOf("a1", 1, 1),
			want:   []string{CheckLinearizable, CheckSettled, CheckFinal},
		},
		{
			desc: "IN_PROGRESS with a holder after DUPLICATE (a stale fast tier)",
			ops:  append(happy(), inProgress(claimOp(3, "a4", 12, 13), "a1")),
			want: []string{CheckLinearizable},
		},
		{
			desc: "own granted attempt told IN_PROGRESS long after the grant",
			ops: []Op{
				failed(claimOp(1, "a1", 0, 1), codes.Unavailable),
				inProgress(claimOp(1, "a1", 3000, 3001), ""),
				acquired(claimOp(1, "a1", 6000, 6001), 1),
				transitionOp(1, 1, processing, "", 6002, 6003),
				transitionOp(1, 1, settledSt, "r1", 6004, 6005),
				probe("r0", "r1", 7000),
			},
			grants: grantsOf("a1", 1, 0),
			want:   []string{CheckAttempt, CheckHolder},
		},
		{
			desc: "own granted attempt told IN_PROGRESS by its own marker right after the failure",
			ops: []Op{
				failed(claimOp(1, "a1", 0, 1), codes.DeadlineExceeded),
				inProgress(claimOp(1, "a1", 20, 21), ""),
				inProgress(claimOp(2, "a2", 30, 31), "a1"),
				probe("r0", "", 7000),
			},
			grants: grantsOf("a1", 1, 0),
			want:   []string{CheckAttempt, CheckHolder, CheckLinearizable},
		},
		{
			desc: "another holder's IN_PROGRESS to an attempt granted later",
			ops: []Op{
				acquired(claimOp(1, "a1", 0, 2), 1),
				failed(claimOp(2, "a2", 3, 4), codes.DeadlineExceeded),
				inProgress(claimOp(2, "a2", 5, 6), "a1"),
				releaseOp(1, 1, 7, 8),
				func() Op { o := acquired(claimOp(2, "a2", 9, 10), 2); o.Reason = pb.Reason_REASON_RELEASED; return o }(),
				transitionOp(2, 2, processing, "", 11, 12),
				transitionOp(2, 2, settledSt, "r2", 13, 14),
				probe("r0", "r2", 20),
			},
			grants: grantsOf("a1", 1, 0, "a2", 2, 9),
		},
		{
			desc: "a non-retryable failure",
			ops:  append(happy(), failed(claimOp(3, "a4", 12, 13), codes.Internal)),
			want: []string{CheckCode},
		},
		{
			desc:   "ACQUIRED with no grant in the audit log",
			ops:    happy(),
			grants: []Grant{},
			want:   []string{CheckAudit},
		},
		{
			desc:   "a grant nobody saw and no failed call explains",
			ops:    happy(),
			grants: grantsOf("a1", 1, 1, "zz", 2, 3),
			want:   []string{CheckAudit},
		},
		{
			desc: "final probe still IN_PROGRESS",
			ops: func() []Op {
				o := happy()
				o[len(o)-1] = inProgress(claimOp(99, "p", 21, 22), "a1")
				o[len(o)-1].Probe, o[len(o)-1].Replica = true, "r1"
				return o
			}(),
			want: []string{CheckLinearizable, CheckFinal},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			res := Check(Input{Ops: tc.ops, Grants: tc.grants, Replicas: []string{"r0", "r1"}[:replicasOf(tc.ops)]})
			got := map[string]bool{}
			for _, v := range res.Violations {
				got[v.Check] = true
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			sort.Strings(names)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if diff := cmp.Diff(want, names); diff != "" {
				t.Errorf("Check() failed checks (-want +got):\n%s\nviolations: %v", diff, res.Violations)
			}
		})
	}
}

// replicasOf is how many replicas the probes of ops asked.
func replicasOf(ops []Op) int {
	n := 0
	for _, o := range ops {
		if o.Probe {
			n++
		}
	}
	return n
}

func TestCheckWritesVisualizationOfIllegalKey(t *testing.T) {
	dir := t.TempDir()
	ops := append(happy(), inProgress(claimOp(3, "a4", 12, 13), "a1"))
	res := Check(Input{Ops: ops, Replicas: []string{"r0", "r1"}, VizDir: dir})
	if res.Illegal != 1 {
		t.Fatalf("Check() Illegal = %d, want 1", res.Illegal)
	}
	path := res.Visualizations["k"]
	if path != filepath.Join(dir, "k.html") {
		t.Fatalf("Visualizations[k] = %q, want %q", path, filepath.Join(dir, "k.html"))
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Errorf("visualization %s: %v (size %v)", path, err, fi)
	}
}

func TestModelTransitionRepeats(t *testing.T) {
	r := register{Exists: true, Token: 1, State: processing, AttemptID: "a1"}
	in := &Op{Kind: KindTransition, Token: 1, To: settledSt, Result: "x"}
	ok, next := step(r, in, &Op{Code: codes.OK, Changed: true, AckState: settledSt, AckResult: "x"})
	if !ok || next.State != settledSt || next.Result != "x" {
		t.Fatalf("SETTLED from PROCESSING = %v, %v; want ok, settled with x", ok, next)
	}
	if ok, _ := step(next, in, &Op{Code: codes.OK, Changed: false, AckState: settledSt, AckResult: "x"}); !ok {
		t.Errorf("a repeated SETTLED answered changed=false was refused by the model")
	}
	stale := &Op{Kind: KindTransition, Token: 2, To: settledSt}
	if ok, _ := step(next, stale, &Op{Code: codes.OK, Changed: false, AckState: settledSt}); ok {
		t.Errorf("a stale token answered OK was accepted by the model")
	}
	if ok, _ := step(next, stale, &Op{Code: codes.Aborted, ErrReason: reasonStale}); !ok {
		t.Errorf("a stale token answered STALE_TOKEN was refused by the model")
	}
}

// TestCheckOrphanedGrant: a claim that failed for its caller but ran on in
// the server, and took the key over after its retry had been told
// IN_PROGRESS, holds the key until its lease ends. It is reported apart, and
// only when the audit log shows it is exactly that.
func TestCheckOrphanedGrant(t *testing.T) {
	heldBy := func(replica, holder string, t0 int64) Op {
		o := inProgress(claimOp(99, "probe-"+replica, t0, t0+1), holder)
		o.Probe, o.Replica = true, replica
		return o
	}
	history := func(sawGrant bool) []Op {
		ops := []Op{
			acquired(claimOp(1, "a1", 0, 2), 1),
			failed(claimOp(2, "a2", 3, 4), codes.DeadlineExceeded),
			inProgress(claimOp(2, "a2", 5, 6), "a1"),
			releaseOp(1, 1, 7, 8),
		}
		if sawGrant {
			ops = append(ops, func() Op { o := acquired(claimOp(2, "a2", 9, 10), 2); o.Reason = pb.Reason_REASON_RELEASED; return o }())
		}
		return append(ops,
			inProgress(claimOp(2, "a3", 20, 21), "a2"),
			heldBy("r0", "a2", 100),
			heldBy("r1", "a2", 101),
		)
	}
	tests := []struct {
		desc         string
		ops          []Op
		grants       []Grant
		wantChecks   []string
		wantOrphaned []string
	}{
		{desc: "held by a failed call's grant", ops: history(false), grants: grantsOf("a1", 1, 0, "a2", 2, 8), wantOrphaned: []string{"k"}},
		{desc: "held by a grant its caller saw", ops: history(true), grants: grantsOf("a1", 1, 0, "a2", 2, 8), wantChecks: []string{CheckConverge}},
		{desc: "no audit log to tell", ops: history(false), wantChecks: []string{CheckConverge}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			res := Check(Input{Ops: tc.ops, Grants: tc.grants, Unfinished: []string{"k"}, Replicas: []string{"r0", "r1"}})
			var checks []string
			for _, v := range res.Violations {
				checks = append(checks, v.Check)
			}
			if diff := cmp.Diff(tc.wantChecks, checks); diff != "" {
				t.Errorf("violations (-want +got):\n%s\n%v", diff, res.Violations)
			}
			if diff := cmp.Diff(tc.wantOrphaned, res.Orphaned); diff != "" {
				t.Errorf("Orphaned (-want +got):\n%s", diff)
			}
		})
	}
}
