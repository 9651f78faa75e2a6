package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/chaos"
)

// crashPoint is a row of the crash-point matrix: where claimd dies (a point
// of cmd/claimd/crashpoint_chaos.go) and what the deliveries after it must
// see.
type crashPoint struct {
	point  string
	killed string // where the process dies, for the report
	// env is the point claimd is armed with when it is not point itself.
	env string
	// entity: the key is an entity event (crash_entity.go).
	entity bool
}

var crashPoints = []crashPoint{
	{point: "reserve", killed: "after the fast-tier reserve, before the durable claim"},
	{point: "claim-commit", killed: "after the durable claim committed ACQUIRED, before the fast tier and the reply"},
	{point: "transition-commit", killed: "during Transition: SETTLED committed, before the fast tier and the reply"},
	{point: "release-commit", killed: "during Release: committed, before the fast tier and the reply"},
	{point: "entity-settle-before", entity: true,
		killed: "during an entity event's SETTLED, inside its transaction: the entity row not yet updated"},
	{point: "entity-settle-after", entity: true,
		killed: "during an entity event's SETTLED, inside its transaction: the entity row updated, not committed"},
	{point: "entity-settle-commit", env: "transition-commit", entity: true,
		killed: "during an entity event's SETTLED: committed (record and entity), before the fast tier and the reply"},
}

// crashStep is one call after the crash and what it had to answer.
type crashStep struct {
	Who, Call, Replica, Got, Want string
	OK                            bool
}

// crashRow is one (mode, point) of the matrix.
type crashRow struct {
	Mode, Point, Killed string
	Crashed             bool
	Steps               []crashStep
	Err                 string
}

// OK reports whether the row held.
func (r crashRow) OK() bool {
	if r.Err != "" || !r.Crashed {
		return false
	}
	for _, s := range r.Steps {
		if !s.OK {
			return false
		}
	}
	return true
}

// runCrashMatrix runs every crash point in both modes.
func (s *suite) runCrashMatrix() []crashRow {
	var rows []crashRow
	for _, mode := range []string{modeProduction, modeEmbedded} {
		for _, cp := range crashPoints {
			row := s.crashRow(mode, cp)
			logf("crash %s %s: ok=%v", mode, cp.point, row.OK())
			rows = append(rows, row)
		}
	}
	return rows
}

// crashWorld is one row's replicas: r0 armed to die at the point, and the
// replica the deliveries after the crash go to (r1; embedded: r0 again,
// restarted on the same data dir).
type crashWorld struct {
	r0, other  *replica
	t0, tOther *target
	replicas   []*replica
	targets    []*target
	l          *load
	key        string
	attempt    string
	client     int
}

func (s *suite) crashRow(mode string, cp crashPoint) (row crashRow) {
	row = crashRow{Mode: mode, Point: cp.point, Killed: cp.killed}
	name := "crash-" + mode[:5] + "-" + cp.point
	env := cp.point
	if cp.env != "" {
		env = cp.env
	}
	w, err := s.crashSetup(mode, name, env)
	if w != nil {
		defer func() {
			for _, t := range w.targets {
				t.cc.Close()
			}
			for _, r := range w.replicas {
				r.stop()
			}
		}()
	}
	if err != nil {
		row.Err = err.Error()
		return row
	}
	if cp.entity {
		return s.crashEntity(row, w)
	}
	ctx := s.ctx
	l, key := w.l, w.key
	step := func(who, replica string, op chaos.Op, want string, ok bool) {
		row.Steps = append(row.Steps, crashStep{Who: who, Call: op.Kind.String(), Replica: replica, Got: op.AnswerString(), Want: want, OK: ok})
	}
	// retried sends f until it is answered (the restarted replica may still
	// be reconnecting).
	retried := func(f func() chaos.Op) chaos.Op {
		var op chaos.Op
		for i := 0; i < 10; i++ {
			if op = f(); op.Answered() || !chaos.Retryable(op.Code) {
				return op
			}
			sleep(ctx, 200*time.Millisecond)
		}
		return op
	}
	claim := func(t *target, attempt string) chaos.Op {
		return retried(func() chaos.Op { op, _ := l.claimOn(ctx, t, w.client, key, attempt, false); return op })
	}
	fenced := func(t *target, req chaos.Op, grant *pb.ClaimResponse) chaos.Op {
		l.targets = []*target{t}
		return retried(func() chaos.Op { return l.call(ctx, w.client, key, req, grant) })
	}
	is := func(op chaos.Op, out pb.Outcome) bool { return op.Code == codes.OK && op.Outcome == out }

	// Drive A, the owner, to the crash on r0.
	result := key + "/settled"
	var grant *pb.ClaimResponse
	switch cp.point {
	case "reserve", "claim-commit":
		l.claimOn(ctx, w.t0, w.client, key, w.attempt, false)
	default:
		op, resp := l.claimOn(ctx, w.t0, w.client, key, w.attempt, false)
		if !is(op, pb.Outcome_OUTCOME_ACQUIRED) {
			row.Err = "setup Claim: " + op.AnswerString()
			return row
		}
		grant = resp
		l.targets = []*target{w.t0}
		if op := l.call(ctx, w.client, key, chaos.Op{Kind: chaos.KindTransition, Token: 1, To: pb.EventState_EVENT_STATE_PROCESSING}, grant); op.Code != codes.OK {
			row.Err = "setup PROCESSING: " + op.AnswerString()
			return row
		}
		req := chaos.Op{Kind: chaos.KindRelease, Token: 1}
		if cp.point == "transition-commit" {
			req = chaos.Op{Kind: chaos.KindTransition, Token: 1, To: pb.EventState_EVENT_STATE_SETTLED, Result: result}
		}
		l.call(ctx, w.client, key, req, grant)
	}
	row.Crashed = w.r0.waitExit(10*time.Second) && w.r0.killedBySignal()
	if !row.Crashed {
		row.Err = "claimd did not die at " + cp.point + " (built without -tags chaos?)"
		return row
	}
	if err := w.r0.start(ctx); err != nil { // disarmed: the env applies to one start
		row.Err = err.Error()
		return row
	}

	other, otherName := w.tOther, w.other.name
	switch cp.point {
	case "reserve", "claim-commit":
		op := claim(other, w.attempt)
		step("A (owner) retries Claim, same attempt_id", otherName, op, "ACQUIRED t1: its own attempt, never IN_PROGRESS by itself",
			is(op, pb.Outcome_OUTCOME_ACQUIRED) && op.AckToken == 1)
		op = claim(w.t0, "b")
		step("B (next delivery)", w.r0.name, op, "IN_PROGRESS held by A",
			is(op, pb.Outcome_OUTCOME_IN_PROGRESS) && op.AckHolder == w.attempt)
	case "transition-commit":
		op := claim(other, "b")
		step("B (next delivery)", otherName, op, "DUPLICATE with the result, or IN_PROGRESS (fast tier stale until A retries)",
			(is(op, pb.Outcome_OUTCOME_DUPLICATE) && op.AckResult == result) || is(op, pb.Outcome_OUTCOME_IN_PROGRESS))
		op = fenced(other, chaos.Op{Kind: chaos.KindTransition, Token: 1, To: pb.EventState_EVENT_STATE_SETTLED, Result: result}, grant)
		step("A retries SETTLED", otherName, op, "OK, changed=false, SETTLED",
			op.Code == codes.OK && op.AckState == pb.EventState_EVENT_STATE_SETTLED && op.AckResult == result)
		op = claim(w.t0, "c")
		step("C (next delivery)", w.r0.name, op, "DUPLICATE with the result",
			is(op, pb.Outcome_OUTCOME_DUPLICATE) && op.AckResult == result)
	case "release-commit":
		op := claim(other, "b")
		takenOver := is(op, pb.Outcome_OUTCOME_ACQUIRED) && op.AckToken == 2 && op.Reason == pb.Reason_REASON_RELEASED
		step("B (next delivery)", otherName, op, "ACQUIRED t2 RELEASED, or IN_PROGRESS held by A (fast tier stale until A retries)",
			takenOver || (is(op, pb.Outcome_OUTCOME_IN_PROGRESS) && op.AckHolder == w.attempt))
		op = fenced(other, chaos.Op{Kind: chaos.KindRelease, Token: 1}, grant)
		if takenOver {
			step("A retries Release", otherName, op, "ABORTED/STALE_TOKEN (B holds t2)",
				op.Code == codes.Aborted && op.ErrReason == pb.ErrorReason_STALE_TOKEN.String())
		} else {
			step("A retries Release", otherName, op, "OK, released", op.Code == codes.OK && op.Released)
		}
		op = claim(w.t0, "c")
		if takenOver {
			step("C (next delivery)", w.r0.name, op, "IN_PROGRESS held by B", is(op, pb.Outcome_OUTCOME_IN_PROGRESS) && op.AckHolder == "b")
		} else {
			step("C (next delivery)", w.r0.name, op, "ACQUIRED t2 RELEASED",
				is(op, pb.Outcome_OUTCOME_ACQUIRED) && op.AckToken == 2 && op.Reason == pb.Reason_REASON_RELEASED)
		}
	}
	return row
}

// crashSetup starts the row's replicas, r0 armed at point for one key.
func (s *suite) crashSetup(mode, name, point string) (*crashWorld, error) {
	dir := filepath.Join(s.opts.workDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "providers.yaml"), s.providers, 0o644); err != nil {
		return nil, err
	}
	w := &crashWorld{key: name + "-key", attempt: "a", client: 1}
	var tierArgs []string
	n := 2
	if mode == modeProduction {
		if err := s.backends.flushRedis(s.ctx); err != nil {
			return nil, err
		}
		url, err := s.backends.createDatabase(s.ctx, dbName(name))
		if err != nil {
			return nil, err
		}
		keyFile, err := writeFastKey(dir)
		if err != nil {
			return nil, err
		}
		tierArgs = []string{"--redis-url", s.backends.servers.Redis.URL(), "--fast-tier-key-file", keyFile, "--postgres-url", url}
	} else {
		n = 1
		tierArgs = []string{"--data-dir", filepath.Join(dir, "data")}
	}
	for i := range n {
		r, err := newReplica(fmt.Sprintf("r%d", i), s.claimdChaos, dir, tierArgs)
		if err != nil {
			return w, err
		}
		if i == 0 {
			r.env = []string{"CLAIMD_CHAOS_CRASH=" + point + ":" + w.key}
		}
		w.replicas = append(w.replicas, r)
		if err := r.start(s.ctx); err != nil {
			return w, err
		}
		t, err := dial(r.name, r.addr)
		if err != nil {
			return w, err
		}
		w.targets = append(w.targets, t)
	}
	w.r0, w.t0 = w.replicas[0], w.targets[0]
	w.other, w.tOther = w.replicas[n-1], w.targets[n-1]
	w.l = newLoad(loadConfig{callTimeout: 5 * time.Second}, w.targets)
	return w, nil
}
