package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/internal/textclip"
)

// runner runs scenarios against one claimd and one database.
type runner struct {
	cfg     config
	ctx     context.Context
	addr    string
	client  *claimd.Client
	ledger  *ledger
	runID   string
	verbose io.Writer // receivers' standard error goes here too when set
	// metricsURL is the /metrics of the claimd effectspec started, whose
	// count of recovered settles is all this run's; "" with -claimd.
	metricsURL string
}

// run is one scenario's run: its namespace, events and receivers.
type scenarioRun struct {
	name  string
	ns    string
	ids   []string
	gates []string // crash only
	recv  map[string]*receiver
	soft  []string // violations that did not stop the scenario
}

// redeliverWait is a redelivery's wait_ms: long enough for the lease of a
// killed or stopped holder to end, so that claimd answers the waiting claim
// at that moment, within claimd's maximum wait.
func (r *runner) redeliverWait() time.Duration {
	return min(max(10*r.cfg.lease, 5*time.Second), 30*time.Second)
}

// scenario runs one scenario and checks what it left behind.
func (r *runner) scenario(name string) (tally, []string) {
	s := &scenarioRun{
		name: name,
		ns:   "fx-" + r.runID + "-" + name,
		recv: map[string]*receiver{},
	}
	for i := range r.cfg.events {
		s.ids = append(s.ids, fmt.Sprintf("evt_fx_%s_%s_%d", r.runID, strings.ReplaceAll(name, "-", "_"), i))
	}
	before, metricsErr := r.recovered()
	var err error
	switch name {
	case "crash":
		err = r.crash(s)
	case "zombie-new-first":
		err = r.zombieNewFirst(s)
	case "zombie-old-first":
		err = r.zombieOldFirst(s)
	case "raise":
		err = r.raise(s)
	}
	// Whatever happened, no receiver outlives its scenario.
	for _, rc := range s.recv {
		rc.kill(r.cfg.timeout)
	}
	if err != nil {
		return tally{Scenario: name, Events: len(s.ids), Aborted: firstLine(err.Error())},
			append([]string{fmt.Sprintf("%s: %v", name, err)}, s.soft...)
	}
	events, v := r.collect(s)
	var t tally
	var checked []string
	switch name {
	case "crash":
		t, checked = checkCrash(events, r.ledger.dialect != "sqlite")
	case "zombie-new-first":
		t, checked = checkZombieNewFirst(events)
	case "zombie-old-first":
		t, checked = checkZombieOldFirst(events)
	case "raise":
		t, checked = checkRaise(events)
	}
	// Every recovered answer is a settle claimd must have counted once.
	if r.metricsURL != "" {
		after, err := r.recovered()
		switch {
		case metricsErr != nil || err != nil:
			v = append(v, fmt.Sprintf("%s: reading %s: %v", name, recoveredSeries, cmp.Or(metricsErr, err)))
		case int(after-before) != recoveredSettles(events):
			v = append(v, fmt.Sprintf("%s: claimd's %s rose by %v, want %d (the answers 200 with done true)",
				name, recoveredSeries, after-before, recoveredSettles(events)))
		default:
			t.Extra = append(t.Extra, fmt.Sprintf("claimd counted %v recovered", after-before))
		}
	}
	return t, slices.Concat(s.soft, v, checked)
}

// recovered reads claimd's count of recovered settles; 0 without metrics.
func (r *runner) recovered() (float64, error) {
	if r.metricsURL == "" {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.timeout)
	defer cancel()
	return recoveredCount(ctx, r.metricsURL)
}

// start starts receiver name of s.
func (r *runner) start(s *scenarioRun, name string) (*receiver, error) {
	rc, err := startReceiver(r.ctx, name, r.cfg.receiver, r.addr, s.ns, r.cfg.db, r.verbose, r.cfg.timeout)
	if err != nil {
		return nil, err
	}
	s.recv[name] = rc
	return rc, nil
}

// closeAll closes the receivers' standard input; one that does not exit
// cleanly is a violation, but what the scenario did still counts.
func (r *runner) closeAll(s *scenarioRun, names ...string) {
	for _, n := range names {
		if err := s.recv[n].close(r.cfg.timeout); err != nil {
			s.soft = append(s.soft, fmt.Sprintf("%s: %v", s.name, err))
		}
	}
}

// crash: receiver A takes every delivery, each stopped at a gate drawn from
// the seed (or none), and is killed with SIGKILL once every delivery is at
// its gate or answered; receiver B then redelivers every event. In_effect
// deliveries go last, because a transaction waiting at its gate keeps other
// writers of a SQLite database out: there one of them waits inside its
// transaction and the others queue for the write lock when A dies.
func (r *runner) crash(s *scenarioRun) error {
	s.gates = drawGates(r.cfg.seed, len(s.ids))
	a, err := r.start(s, "A")
	if err != nil {
		return err
	}
	var inEffect []string
	for i, id := range s.ids {
		if s.gates[i] == gateInEffect {
			inEffect = append(inEffect, id)
			continue
		}
		a.deliver(id, r.cfg.lease, 0, s.gates[i], false)
	}
	err = a.waitFor("a gate line or an answer for every delivery", r.cfg.timeout, func() bool {
		for i, id := range s.ids {
			switch s.gates[i] {
			case gateInEffect:
			case gateNone:
				if len(a.answers[id]) == 0 {
					return false
				}
			default: // or an answer: one that skipped its gate fails the checks
				if len(a.at[id]) == 0 && len(a.answers[id]) == 0 {
					return false
				}
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if len(inEffect) > 0 {
		for _, id := range inEffect {
			a.deliver(id, r.cfg.lease, 0, gateInEffect, false)
		}
		need := len(inEffect)
		if r.ledger.dialect == "sqlite" {
			need = 1
		}
		err = a.waitFor(fmt.Sprintf("%d in_effect gate lines", need), r.cfg.timeout, func() bool {
			n := 0
			for _, id := range inEffect {
				if len(a.at[id]) > 0 || len(a.answers[id]) > 0 {
					n++
				}
			}
			return n >= need
		})
		if err != nil {
			return err
		}
	}
	if err := a.kill(r.cfg.timeout); err != nil {
		return err
	}
	b, err := r.start(s, "B")
	if err != nil {
		return err
	}
	for _, id := range s.ids {
		b.deliver(id, r.cfg.lease, r.redeliverWait(), gateNone, false)
	}
	if err := b.waitAnswers(s.ids, 1, "an answer to every redelivery", r.cfg.timeout); err != nil {
		return err
	}
	r.closeAll(s, "B")
	return nil
}

// pauseAtGates has receiver A take every delivery and stop at
// before_effect, then pauses A with SIGSTOP and releases its gates, so that
// A goes on from there only when it wakes.
func (r *runner) pauseAtGates(s *scenarioRun) (*receiver, error) {
	a, err := r.start(s, "A")
	if err != nil {
		return nil, err
	}
	for _, id := range s.ids {
		a.deliver(id, r.cfg.lease, 0, gateBeforeEffect, false)
	}
	if err := a.waitGates(s.ids, "a before_effect gate line for every delivery", r.cfg.timeout); err != nil {
		return nil, err
	}
	if err := a.stop(r.cfg.timeout); err != nil {
		return nil, err
	}
	for _, id := range s.ids {
		a.release(id)
	}
	return a, nil
}

// zombieNewFirst: A pauses before its effect; B takes every event over at
// the lease's end and settles it; then A wakes.
func (r *runner) zombieNewFirst(s *scenarioRun) error {
	a, err := r.pauseAtGates(s)
	if err != nil {
		return err
	}
	b, err := r.start(s, "B")
	if err != nil {
		return err
	}
	for _, id := range s.ids {
		b.deliver(id, r.cfg.lease, r.redeliverWait(), gateNone, false)
	}
	if err := b.waitAnswers(s.ids, 1, "B's answer to every takeover", r.cfg.timeout); err != nil {
		return err
	}
	if err := a.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if err := a.waitAnswers(s.ids, 1, "A's answer to every delivery after SIGCONT", r.cfg.timeout); err != nil {
		return err
	}
	r.closeAll(s, "A", "B")
	return nil
}

// zombieOldFirst: A pauses before its effect; B takes every event over and
// stops at its own before_effect; A wakes and finishes; then B goes on.
func (r *runner) zombieOldFirst(s *scenarioRun) error {
	a, err := r.pauseAtGates(s)
	if err != nil {
		return err
	}
	b, err := r.start(s, "B")
	if err != nil {
		return err
	}
	for _, id := range s.ids {
		b.deliver(id, r.cfg.lease, r.redeliverWait(), gateBeforeEffect, false)
	}
	if err := b.waitGates(s.ids, "B's before_effect gate line for every takeover", r.cfg.timeout); err != nil {
		return err
	}
	if err := a.signal(syscall.SIGCONT); err != nil {
		return err
	}
	if err := a.waitAnswers(s.ids, 1, "A's answer to every delivery after SIGCONT", r.cfg.timeout); err != nil {
		return err
	}
	for _, id := range s.ids {
		b.release(id)
	}
	if err := b.waitAnswers(s.ids, 1, "B's answer to every takeover", r.cfg.timeout); err != nil {
		return err
	}
	r.closeAll(s, "A", "B")
	return nil
}

// raise: receiver R's delivery raises inside its effect; then R gets the
// event again.
func (r *runner) raise(s *scenarioRun) error {
	rc, err := r.start(s, "R")
	if err != nil {
		return err
	}
	for _, id := range s.ids {
		rc.deliver(id, r.cfg.lease, 0, gateNone, true)
	}
	if err := rc.waitAnswers(s.ids, 1, "an answer to every raising delivery", r.cfg.timeout); err != nil {
		return err
	}
	for _, id := range s.ids {
		rc.deliver(id, r.cfg.lease, r.redeliverWait(), gateNone, false)
	}
	if err := rc.waitAnswers(s.ids, 2, "an answer to every second delivery", r.cfg.timeout); err != nil {
		return err
	}
	r.closeAll(s, "R")
	return nil
}

// collect reads what a scenario left: ledger rows and fences in the
// database, records in claimd, and the receivers' lines. Rows of keys the
// scenario did not deliver, and protocol errors, are violations.
func (r *runner) collect(s *scenarioRun) ([]event, []string) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.timeout)
	defer cancel()
	var v []string
	rows, err := r.ledger.rows(ctx, s.ns)
	if err != nil {
		v = append(v, fmt.Sprintf("%s: %v", s.name, err))
	}
	fences, err := r.ledger.fences(ctx, s.ns)
	if err != nil {
		v = append(v, fmt.Sprintf("%s: %v", s.name, err))
	}
	names := map[string]string{} // writer PID -> receiver name
	for name, rc := range s.recv {
		names[pidString(rc.pid)] = name
		v = append(v, prefixAll(s.name+": ", rc.protocolErrors())...)
	}
	events := make([]event, len(s.ids))
	for i, id := range s.ids {
		e := event{ID: id, Writers: map[string]int{}, Fences: fences[id], Answers: map[string][]answer{}, At: map[string][]string{}}
		if s.gates != nil {
			e.Gate = s.gates[i]
		}
		for w, n := range rows[id] {
			name, ok := names[w]
			if !ok {
				name = "pid " + w
			}
			e.Writers[name] += n
		}
		delete(rows, id)
		delete(fences, id)
		rec, err := r.client.Get(ctx, claimd.Ref{Namespace: s.ns, Provider: "stripe", Key: id})
		if err != nil {
			e.RecordErr = err.Error()
		} else {
			e.Record = &recordView{
				State:  strings.TrimPrefix(rec.GetState().String(), "EVENT_STATE_"),
				Token:  rec.GetFencingToken(),
				Result: string(rec.GetResult()),
			}
		}
		for name, rc := range s.recv {
			at, ans := rc.snapshot(id)
			if len(at) > 0 {
				e.At[name] = at
			}
			if len(ans) > 0 {
				e.Answers[name] = ans
			}
		}
		events[i] = e
	}
	for key, w := range rows {
		v = append(v, fmt.Sprintf("%s: ledger rows of a key no delivery had, %q: %s", s.name, textclip.Cut(key, maxEcho), formatCounts(w)))
	}
	for key := range fences {
		v = append(v, fmt.Sprintf("%s: a fence row of a key no delivery had, %q", s.name, textclip.Cut(key, maxEcho)))
	}
	return events, v
}

func prefixAll(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
