package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/claimd/claimd/internal/textclip"
)

// Gates a delivery may stop at (clients/guardspec/README.md, "Effect
// processes"). gateNone is no gate: the delivery runs through.
const (
	gateNone         = ""
	gateBeforeEffect = "before_effect"
	gateInEffect     = "in_effect"
	gateAfterCommit  = "after_commit"
)

// crashGates are the gates the crash scenario draws from, each equally likely.
var crashGates = []string{gateNone, gateBeforeEffect, gateInEffect, gateAfterCommit}

// drawGates draws the crash gate of n events from seed: the same seed and n
// give the same gates, so a printed seed replays a run's draw.
func drawGates(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 0x65666665637473)) // "effects"
	gates := make([]string, n)
	for i := range gates {
		gates[i] = crashGates[r.IntN(len(crashGates))]
	}
	return gates
}

// gateName is a gate for messages and counts.
func gateName(g string) string {
	if g == gateNone {
		return "none"
	}
	return g
}

// answer is one answer line of a receiver: the guard's HTTP answer to a
// delivery and whether its effect found a committed fence.
type answer struct {
	Status int
	Body   string
	Done   bool
}

func (a answer) String() string {
	return fmt.Sprintf("%d %q done=%t", a.Status, textclip.Cut(a.Body, maxEcho), a.Done)
}

// fenceRow is one claimd_effects row of an event.
type fenceRow struct {
	Token  uint64
	Result string
}

// recordView is the part of claimd's record the checks read.
type recordView struct {
	State  string // the enum's name without its prefix: SETTLED
	Token  uint64
	Result string
}

// event is everything a scenario observed of one event, by receiver name
// ("A", "B", "R"). The checks below are pure functions of it.
type event struct {
	ID   string
	Gate string // crash: the gate drawn for receiver A's delivery
	// Writers counts ledger rows by writer: a receiver's name, or
	// "pid N" for a writer that is neither receiver.
	Writers   map[string]int
	Fences    []fenceRow
	Record    *recordView // nil: claimd has no record (RecordErr says why)
	RecordErr string
	Answers   map[string][]answer
	At        map[string][]string // gate lines, by receiver
}

// wantResult is the result every receiver stores for an event: compact JSON.
func wantResult(id string) string { return `{"event":"` + id + `"}` }

// tally is a scenario's counts line.
type tally struct {
	Scenario  string
	Events    int
	Rows      int
	Twice     int
	Never     int
	Recovered int
	Extra     []string // the scenario's own counts, in order
	Aborted   string   // why the scenario stopped early; "" when it ran through
}

func (t tally) String() string {
	s := fmt.Sprintf("%s: %d events, %d ledger rows, %d written twice, %d never written, %d recovered",
		t.Scenario, t.Events, t.Rows, t.Twice, t.Never, t.Recovered)
	if len(t.Extra) > 0 {
		s += ", " + strings.Join(t.Extra, ", ")
	}
	if t.Aborted != "" {
		s += " (aborted: " + t.Aborted + ")"
	}
	return s
}

// checker collects the violations of one scenario.
type checker struct {
	scenario   string
	violations []string
}

func (c *checker) fail(id, format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf("%s: %s: %s", c.scenario, id, fmt.Sprintf(format, args...)))
}

// written checks what every scenario wants of an event: exactly one ledger
// row, one fence row holding the event's result, and a SETTLED record
// holding it too. settler is the receiver whose settle the record shows: the
// fence's token is the record's when the settler wrote the row, and an
// earlier (smaller) token when an earlier holder did. It returns the writer,
// or "" when there is not exactly one row.
func (c *checker) written(t *tally, e *event, settler string) string {
	rows, writer := 0, ""
	for w, n := range e.Writers {
		rows += n
		writer = w
	}
	t.Rows += rows
	switch {
	case rows == 0:
		t.Never++
		c.fail(e.ID, "never written: no ledger row")
		writer = ""
	case rows > 1:
		t.Twice++
		c.fail(e.ID, "written %d times: ledger rows by writer %s", rows, formatCounts(e.Writers))
		writer = ""
	}
	want := wantResult(e.ID)
	if e.Record == nil {
		c.fail(e.ID, "claimd has no record: %s", e.RecordErr)
	} else {
		if e.Record.State != "SETTLED" {
			c.fail(e.ID, "record state %s, want SETTLED", e.Record.State)
		}
		if e.Record.Result != want {
			c.fail(e.ID, "record result %q, want %q", textclip.Cut(e.Record.Result, maxEcho), want)
		}
	}
	switch {
	case len(e.Fences) != 1:
		c.fail(e.ID, "%d fence rows in claimd_effects, want 1", len(e.Fences))
	case e.Fences[0].Result != want:
		c.fail(e.ID, "fence result %q, want %q", textclip.Cut(e.Fences[0].Result, maxEcho), want)
	case e.Record != nil && writer != "":
		f, r := e.Fences[0].Token, e.Record.Token
		if writer == settler && f != r {
			c.fail(e.ID, "fence token %d, want the record's %d (the row is %s's, whose settle the record should show)", f, r, writer)
		}
		if writer != settler && f >= r {
			c.fail(e.ID, "fence token %d, want an earlier holder's, below the record's %d (the row is %s's; the record should show %s's settle)", f, r, writer, settler)
		}
	}
	return writer
}

// want is an expected answer: Body "" and Done nil are not checked.
type want struct {
	Status int
	Body   string
	Done   *bool
}

var (
	isDone  = new(true)
	notDone = new(false)
)

func (w want) String() string {
	s := fmt.Sprint(w.Status)
	if w.Body != "" {
		s += fmt.Sprintf(" %q", w.Body)
	}
	if w.Done != nil {
		s += fmt.Sprintf(" done=%t", *w.Done)
	}
	return s
}

// answers checks that receiver name answered the event as want says, in
// order.
func (c *checker) answers(e *event, name string, want ...want) {
	got := e.Answers[name]
	if len(got) != len(want) {
		ws := make([]string, len(want))
		for i, w := range want {
			ws[i] = w.String()
		}
		c.fail(e.ID, "receiver %s answered %d times %s, want %d [%s]", name, len(got), formatAnswers(got), len(want), strings.Join(ws, "; "))
		return
	}
	for i, w := range want {
		g := got[i]
		if g.Status != w.Status || (w.Done != nil && g.Done != *w.Done) || (w.Body != "" && g.Body != w.Body) {
			c.fail(e.ID, "receiver %s answer %d = %v, want %v", name, i+1, g, w)
		}
	}
}

// gates checks the gate lines of receiver name: want, or (with optional)
// want or nothing. It reports whether the gate was reached.
func (c *checker) gates(e *event, name, want string, optional bool) bool {
	got := e.At[name]
	if want == gateNone || (optional && len(got) == 0) {
		if len(got) > 0 {
			c.fail(e.ID, "receiver %s stopped at %v, want no gate", name, got)
		}
		return false
	}
	if len(got) != 1 || got[0] != want {
		c.fail(e.ID, "receiver %s gate lines %v, want [%s]", name, got, want)
		return false
	}
	return true
}

// checkCrash: receiver A took every delivery, stopped at its drawn gate and
// was killed with SIGKILL; receiver B redelivered every event. An event A
// answered (no gate) or whose effect A committed (after_commit) is A's row;
// B finds the latter's fence (done, recovered). Every other one is B's.
// inEffectAll says whether every in_effect delivery could reach its gate
// (PostgreSQL); SQLite has one writer, so only one waits inside its
// transaction and the others queue for the write lock when A dies.
func checkCrash(events []event, inEffectAll bool) (tally, []string) {
	c := &checker{scenario: "crash"}
	t := tally{Scenario: "crash", Events: len(events)}
	drawn := map[string]int{}
	inEffectReached := 0
	for i := range events {
		e := &events[i]
		drawn[e.Gate]++
		wantWriter, settler := "B", "B"
		if e.Gate == gateNone {
			wantWriter, settler = "A", "A"
		} else if e.Gate == gateAfterCommit {
			wantWriter = "A"
		}
		if w := c.written(&t, e, settler); w != "" && w != wantWriter {
			c.fail(e.ID, "ledger row written by %s, want %s (A's gate: %s)", w, wantWriter, gateName(e.Gate))
		}
		if c.gates(e, "A", e.Gate, e.Gate == gateInEffect && !inEffectAll) && e.Gate == gateInEffect {
			inEffectReached++
		}
		body := wantResult(e.ID)
		if e.Gate == gateNone {
			c.answers(e, "A", want{Status: 200, Body: body, Done: notDone})
		} else {
			c.answers(e, "A") // killed at its gate: no answer
		}
		recovered := notDone
		if e.Gate == gateAfterCommit {
			recovered = isDone
		}
		c.answers(e, "B", want{Status: 200, Body: body, Done: recovered})
		if b := e.Answers["B"]; len(b) == 1 && b[0].Done {
			t.Recovered++
		}
	}
	t.Extra = append(t.Extra, fmt.Sprintf("gates none=%d before_effect=%d in_effect=%d (%d inside the transaction) after_commit=%d",
		drawn[gateNone], drawn[gateBeforeEffect], drawn[gateInEffect], inEffectReached, drawn[gateAfterCommit]))
	return t, c.violations
}

// checkZombieNewFirst: A stopped past its lease at before_effect, B took
// over and settled, then A woke: the row is B's, A answers 409.
func checkZombieNewFirst(events []event) (tally, []string) {
	c := &checker{scenario: "zombie-new-first"}
	t := tally{Scenario: "zombie-new-first", Events: len(events)}
	a409, b200 := 0, 0
	for i := range events {
		e := &events[i]
		if w := c.written(&t, e, "B"); w != "" && w != "B" {
			c.fail(e.ID, "ledger row written by %s, want B (A woke after B settled)", w)
		}
		c.gates(e, "A", gateBeforeEffect, false)
		c.answers(e, "A", want{Status: 409})
		c.answers(e, "B", want{Status: 200, Body: wantResult(e.ID), Done: notDone})
		a409 += countStatus(e.Answers["A"], 409)
		b200 += countStatus(e.Answers["B"], 200)
		t.Recovered += countDone(e.Answers["B"])
	}
	t.Extra = append(t.Extra, fmt.Sprintf("A answered 409 %d times, B 200 %d times", a409, b200))
	return t, c.violations
}

// checkZombieOldFirst: A stopped past its lease at before_effect, B took
// over and stopped at its own before_effect, A woke and finished, then B
// went on. A's effect may have committed (its row: B's effect is done and
// B answers A's result) or been cancelled by the takeover (B's row).
func checkZombieOldFirst(events []event) (tally, []string) {
	c := &checker{scenario: "zombie-old-first"}
	t := tally{Scenario: "zombie-old-first", Events: len(events)}
	byA, byB := 0, 0
	for i := range events {
		e := &events[i]
		w := c.written(&t, e, "B")
		c.gates(e, "A", gateBeforeEffect, false)
		c.gates(e, "B", gateBeforeEffect, false)
		c.answers(e, "A", want{Status: 409})
		switch w {
		case "A":
			byA++
			c.answers(e, "B", want{Status: 200, Body: wantResult(e.ID), Done: isDone})
		case "B":
			byB++
			c.answers(e, "B", want{Status: 200, Body: wantResult(e.ID), Done: notDone})
		case "":
		default:
			c.fail(e.ID, "ledger row written by %s, want A or B", w)
		}
		t.Recovered += countDone(e.Answers["B"])
	}
	t.Extra = append(t.Extra, fmt.Sprintf("%d written by A (B must find its fence), %d by B (A rolled back)", byA, byB))
	return t, c.violations
}

// checkRaise: receiver R's first delivery raised inside its effect (500,
// rolled back), the second wrote the row (200).
func checkRaise(events []event) (tally, []string) {
	c := &checker{scenario: "raise"}
	t := tally{Scenario: "raise", Events: len(events)}
	ok := 0
	for i := range events {
		e := &events[i]
		if w := c.written(&t, e, "R"); w != "" && w != "R" {
			c.fail(e.ID, "ledger row written by %s, want R", w)
		}
		before := len(c.violations)
		c.answers(e, "R", want{Status: 500, Done: notDone}, want{Status: 200, Body: wantResult(e.ID), Done: notDone})
		if len(c.violations) == before {
			ok++
		}
		t.Recovered += countDone(e.Answers["R"])
	}
	t.Extra = append(t.Extra, fmt.Sprintf("%d answered 500 then 200", ok))
	return t, c.violations
}

func countStatus(as []answer, status int) int {
	n := 0
	for _, a := range as {
		if a.Status == status {
			n++
		}
	}
	return n
}

func countDone(as []answer) int {
	n := 0
	for _, a := range as {
		if a.Done {
			n++
		}
	}
	return n
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func formatAnswers(as []answer) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.String()
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// maxEcho bounds hostile or long text quoted in a message.
const maxEcho = 200
