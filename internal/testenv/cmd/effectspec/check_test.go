package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLedgerSchemaIsTheContracts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "clients", "guardspec", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Effects struct {
			LedgerSchema string `json:"ledger_schema"`
		} `json:"effects"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Effects.LedgerSchema != ledgerSchema {
		t.Errorf("ledgerSchema = %q, want scenarios.json's effects.ledger_schema %q", ledgerSchema, spec.Effects.LedgerSchema)
	}
}

func TestDrawGates(t *testing.T) {
	a, b := drawGates(42, 400), drawGates(42, 400)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("drawGates(42) twice differs (-first +second):\n%s", diff)
	}
	if cmp.Equal(a, drawGates(43, 400)) {
		t.Error("drawGates(42) = drawGates(43): the seed is not used")
	}
	counts := map[string]int{}
	for _, g := range a {
		counts[g]++
	}
	for _, g := range crashGates {
		// Binomial(400, 1/4): mean 100, standard deviation about 8.7.
		if n := counts[g]; n < 60 || n > 140 {
			t.Errorf("drawGates(42, 400) drew %s %d times, want about 100 (all: %v)", gateName(g), n, counts)
		}
	}
	if len(counts) != len(crashGates) {
		t.Errorf("drawGates drew %v, want only %q", counts, crashGates)
	}
}

// settled is a fake event whose ledger, fence and record are as a correct
// run leaves them: writer's row and fence, settled by settler.
func settled(id, writer, settler string) event {
	tokens := map[string]uint64{"A": 1, "B": 2, "R": 1}
	return event{
		ID:      id,
		Writers: map[string]int{writer: 1},
		Fences:  []fenceRow{{Token: tokens[writer], Result: wantResult(id)}},
		Record:  &recordView{State: "SETTLED", Token: tokens[settler], Result: wantResult(id)},
		Answers: map[string][]answer{},
		At:      map[string][]string{},
	}
}

// crashEvent is a correct crash event for gate.
func crashEvent(id, gate string) event {
	writer, settler := "B", "B"
	switch gate {
	case gateNone:
		writer, settler = "A", "A"
	case gateAfterCommit:
		writer = "A"
	}
	e := settled(id, writer, settler)
	e.Gate = gate
	body := wantResult(id)
	if gate == gateNone {
		e.Answers["A"] = []answer{{Status: 200, Body: body}}
	} else {
		e.At["A"] = []string{gate}
	}
	e.Answers["B"] = []answer{{Status: 200, Body: body, Done: gate == gateAfterCommit}}
	return e
}

func TestCheckCrash(t *testing.T) {
	tests := []struct {
		desc        string
		change      func(es []event) // applied to one correct event of each gate
		inEffectAll bool
		want        []string // substrings of the violations, in order
		wantTally   string
	}{{
		desc:        "a correct run",
		change:      func([]event) {},
		inEffectAll: true,
		wantTally:   "crash: 4 events, 4 ledger rows, 0 written twice, 0 never written, 1 recovered, gates none=1 before_effect=1 in_effect=1 (1 inside the transaction) after_commit=1",
	}, {
		desc:      "SQLite: an in_effect delivery queued for the write lock",
		change:    func(es []event) { es[2].At = map[string][]string{} },
		wantTally: "crash: 4 events, 4 ledger rows, 0 written twice, 0 never written, 1 recovered, gates none=1 before_effect=1 in_effect=1 (0 inside the transaction) after_commit=1",
	}, {
		desc:        "PostgreSQL: every in_effect delivery must reach its gate",
		change:      func(es []event) { es[2].At = map[string][]string{} },
		inEffectAll: true,
		want:        []string{"crash: evt_2: receiver A gate lines [], want [in_effect]"},
	}, {
		desc: "an effect committed by A and written again by B",
		change: func(es []event) {
			es[3].Writers = map[string]int{"A": 1, "B": 1}
			es[3].Answers["B"] = []answer{{Status: 200, Body: wantResult("evt_3")}}
		},
		inEffectAll: true,
		want:        []string{"evt_3: written 2 times: ledger rows by writer A=1 B=1", "evt_3: receiver B answer 1 = 200"},
		wantTally:   "crash: 4 events, 5 ledger rows, 1 written twice, 0 never written, 0 recovered",
	}, {
		desc:        "never written",
		change:      func(es []event) { es[1].Writers = map[string]int{} },
		inEffectAll: true,
		want:        []string{"evt_1: never written"},
		wantTally:   "crash: 4 events, 3 ledger rows, 0 written twice, 1 never written",
	}, {
		desc:        "a before_effect row written by the killed receiver",
		change:      func(es []event) { es[1].Writers = map[string]int{"A": 1} },
		inEffectAll: true,
		want:        []string{"evt_1: fence token 2, want an earlier holder's", "evt_1: ledger row written by A, want B"},
	}, {
		desc:        "a writer that is neither receiver",
		change:      func(es []event) { es[0].Writers = map[string]int{"pid 77": 1} },
		inEffectAll: true,
		want:        []string{"evt_0: fence token 1, want an earlier holder's", "evt_0: ledger row written by pid 77, want A"},
	}, {
		desc:        "a record left PROCESSING",
		change:      func(es []event) { es[1].Record.State = "PROCESSING" },
		inEffectAll: true,
		want:        []string{"evt_1: record state PROCESSING, want SETTLED"},
	}, {
		desc:        "no record",
		change:      func(es []event) { es[1].Record, es[1].RecordErr = nil, "not found" },
		inEffectAll: true,
		want:        []string{"evt_1: claimd has no record: not found"},
	}, {
		desc:        "a fence row missing",
		change:      func(es []event) { es[2].Fences = nil },
		inEffectAll: true,
		want:        []string{"evt_2: 0 fence rows in claimd_effects, want 1"},
	}, {
		desc:        "the killed receiver answered a gated delivery",
		change:      func(es []event) { es[1].Answers["A"] = []answer{{Status: 500}} },
		inEffectAll: true,
		want:        []string{"evt_1: receiver A answered 1 times"},
	}, {
		desc:        "a recovered result that is not the fence's",
		change:      func(es []event) { es[3].Answers["B"][0].Body = "{}" },
		inEffectAll: true,
		want:        []string{`evt_3: receiver B answer 1 = 200 "{}" done=true, want 200 "{\"event\":\"evt_3\"}" done=true`},
	}}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var es []event
			for i, g := range []string{gateNone, gateBeforeEffect, gateInEffect, gateAfterCommit} {
				es = append(es, crashEvent("evt_"+string(rune('0'+i)), g))
			}
			tc.change(es)
			tl, v := checkCrash(es, tc.inEffectAll)
			checkViolations(t, v, tc.want)
			if tc.wantTally != "" && !strings.HasPrefix(tl.String(), tc.wantTally) {
				t.Errorf("tally = %q, want it to start with %q", tl, tc.wantTally)
			}
		})
	}
}

func TestCheckZombies(t *testing.T) {
	newFirst := func() event {
		e := settled("evt_0", "B", "B")
		e.At["A"] = []string{gateBeforeEffect}
		e.Answers["A"] = []answer{{Status: 409, Body: "superseded", Done: true}}
		e.Answers["B"] = []answer{{Status: 200, Body: wantResult("evt_0")}}
		return e
	}
	oldFirst := func(writer string) event {
		e := settled("evt_0", writer, "B")
		e.At["A"] = []string{gateBeforeEffect}
		e.At["B"] = []string{gateBeforeEffect}
		e.Answers["A"] = []answer{{Status: 409}}
		e.Answers["B"] = []answer{{Status: 200, Body: wantResult("evt_0"), Done: writer == "A"}}
		return e
	}
	tests := []struct {
		desc  string
		check func([]event) (tally, []string)
		event func() event
		want  []string
	}{
		{desc: "new first: correct", check: checkZombieNewFirst, event: newFirst},
		{desc: "new first: the zombie wrote", check: checkZombieNewFirst, event: func() event {
			e := newFirst()
			e.Writers = map[string]int{"A": 1}
			return e
		}, want: []string{"fence token 2, want an earlier holder's", "ledger row written by A, want B"}},
		{desc: "new first: the zombie answered 200", check: checkZombieNewFirst, event: func() event {
			e := newFirst()
			e.Answers["A"][0].Status = 200
			return e
		}, want: []string{"receiver A answer 1 = 200"}},
		{desc: "old first: A's row, found by B", check: checkZombieOldFirst, event: func() event { return oldFirst("A") }},
		{desc: "old first: B's row after A rolled back", check: checkZombieOldFirst, event: func() event { return oldFirst("B") }},
		{desc: "old first: A's row, but B did not find it", check: checkZombieOldFirst, event: func() event {
			e := oldFirst("A")
			e.Answers["B"][0].Done = false
			return e
		}, want: []string{"receiver B answer 1 = 200 \"{\\\"event\\\":\\\"evt_0\\\"}\" done=false, want 200 \"{\\\"event\\\":\\\"evt_0\\\"}\" done=true"}},
		{desc: "old first: both wrote", check: checkZombieOldFirst, event: func() event {
			e := oldFirst("A")
			e.Writers = map[string]int{"A": 1, "B": 1}
			return e
		}, want: []string{"written 2 times"}},
		{desc: "old first: B never reached its gate", check: checkZombieOldFirst, event: func() event {
			e := oldFirst("B")
			delete(e.At, "B")
			return e
		}, want: []string{"receiver B gate lines [], want [before_effect]"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, v := tc.check([]event{tc.event()})
			checkViolations(t, v, tc.want)
		})
	}
}

func TestCheckRaise(t *testing.T) {
	good := func() event {
		e := settled("evt_0", "R", "R")
		e.Answers["R"] = []answer{{Status: 500, Body: "processing failed; retry later\n"}, {Status: 200, Body: wantResult("evt_0")}}
		return e
	}
	tests := []struct {
		desc   string
		change func(*event)
		want   []string
		tally  string
	}{
		{desc: "correct", change: func(*event) {}, tally: "raise: 1 events, 1 ledger rows, 0 written twice, 0 never written, 0 recovered, 1 answered 500 then 200"},
		{desc: "the raising delivery's row stayed", change: func(e *event) { e.Writers["R"] = 2 }, want: []string{"written 2 times"}},
		{desc: "the raise answered 200", change: func(e *event) { e.Answers["R"][0].Status = 200 }, want: []string{"receiver R answer 1 = 200"}},
		{desc: "a second answer missing", change: func(e *event) { e.Answers["R"] = e.Answers["R"][:1] }, want: []string{"receiver R answered 1 times"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := good()
			tc.change(&e)
			tl, v := checkRaise([]event{e})
			checkViolations(t, v, tc.want)
			if tc.tally != "" && tl.String() != tc.tally {
				t.Errorf("tally = %q, want %q", tl, tc.tally)
			}
		})
	}
}

// checkViolations wants exactly len(want) violations, the i-th containing
// want[i].
func checkViolations(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("violations = %d:\n  %s\nwant %d containing %q", len(got), strings.Join(got, "\n  "), len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("violation %d = %q, want it to contain %q", i, got[i], want[i])
		}
	}
}

func TestParseLines(t *testing.T) {
	tests := []struct {
		desc    string
		lines   []string
		bad     []string
		answers map[string][]answer
		at      map[string][]string
	}{{
		desc:    "the protocol",
		lines:   []string{`{"ready":true}`, `{"event":"e1","at":"before_effect"}`, `{"event":"e1","status":200,"body":"{\"event\":\"e1\"}","done":true}`},
		answers: map[string][]answer{"e1": {{Status: 200, Body: `{"event":"e1"}`, Done: true}}},
		at:      map[string][]string{"e1": {"before_effect"}},
	}, {
		desc:  "a line before ready",
		lines: []string{`{"event":"e1","at":"in_effect"}`, `{"ready":true}`},
		bad:   []string{`receiver A: "{\"event\":\"e1\",\"at\":\"in_effect\"}" before its ready line`},
	}, {
		desc:  "two JSON objects on a line, and a log line",
		lines: []string{`{"ready":true}`, `{"ready":true}{"ready":true}`, `listening`},
		bad:   []string{`receiver A: a line that is not one JSON object`, `receiver A: a line that is not one JSON object: "listening"`},
	}, {
		desc:  "an answer without done",
		lines: []string{`{"ready":true}`, `{"event":"e1","status":200,"body":""}`},
		bad:   []string{`receiver A: a line that is neither a gate nor an answer`},
	}}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := &receiver{name: "A", changed: make(chan struct{}), at: map[string][]string{}, answers: map[string][]answer{}, stderr: &tail{max: 1, copy: io.Discard}}
			for _, l := range tc.lines {
				r.parse([]byte(l))
			}
			checkViolations(t, r.protocolErrors(), tc.bad)
			if tc.answers != nil {
				if diff := cmp.Diff(tc.answers, r.answers); diff != "" {
					t.Errorf("answers (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.at, r.at); diff != "" {
					t.Errorf("gate lines (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		err  string
	}{
		{desc: "a started claimd", args: []string{"-claimd-bin", "/bin/claimd", "-db", "sqlite:/tmp/x.db", "--", "recv", "-x"}},
		{desc: "a running claimd", args: []string{"-claimd", "127.0.0.1:1", "-db", "postgres://u@127.0.0.1/db", "-scenarios", "raise", "--", "recv"}},
		{desc: "both claimds", args: []string{"-claimd-bin", "b", "-claimd", "a", "-db", "sqlite:x", "--", "r"}, err: "exactly one of -claimd-bin and -claimd"},
		{desc: "no receiver", args: []string{"-claimd", "a", "-db", "sqlite:x"}, err: "no receiver command"},
		{desc: "a bad db", args: []string{"-claimd", "a", "-db", "mysql://x", "--", "r"}, err: "want sqlite:PATH or a postgres:// URL"},
		{desc: "an unknown scenario", args: []string{"-claimd", "a", "-db", "sqlite:x", "-scenarios", "crash,zombie", "--", "r"}, err: `unknown scenario "zombie"`},
		{desc: "no events", args: []string{"-claimd", "a", "-db", "sqlite:x", "-events", "0", "--", "r"}, err: "want at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cfg, err := parseFlags(tc.args, io.Discard)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("parseFlags(%q) = %v", tc.args, err)
				}
				if cfg.receiver[0] == "--" || len(cfg.scenarios) == 0 {
					t.Errorf("parseFlags(%q) = receiver %q, scenarios %q", tc.args, cfg.receiver, cfg.scenarios)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseFlags(%q) = %v, want an error containing %q", tc.args, err, tc.err)
			}
		})
	}
}

func TestParseSeries(t *testing.T) {
	text := `# HELP claimd_effects_recovered_total Settles whose result came from an effect fence.
# TYPE claimd_effects_recovered_total counter
claimd_effects_recovered_total{provider="adyen"} 4
claimd_effects_recovered_total{provider="stripe"} 17
claimd_effects_recovered_total{provider="stripe-connect"} 9
`
	got, err := parseSeries(strings.NewReader(text), recoveredSeries)
	if err != nil || got != 17 {
		t.Errorf("parseSeries(%s) = %v, %v, want 17", recoveredSeries, got, err)
	}
	if _, err := parseSeries(strings.NewReader("# nothing\n"), recoveredSeries); err == nil {
		t.Errorf("parseSeries of text without the series = nil error, want one")
	}
}

func TestRecoveredSettles(t *testing.T) {
	events := []event{
		{Answers: map[string][]answer{"A": {{Status: 409, Done: true}}, "B": {{Status: 200, Done: true}}}},
		{Answers: map[string][]answer{"B": {{Status: 200}}}},
		{Answers: map[string][]answer{"R": {{Status: 500}, {Status: 200, Done: true}}}},
	}
	if got := recoveredSettles(events); got != 2 {
		t.Errorf("recoveredSettles = %d, want 2 (a 409 that found a fence settled nothing)", got)
	}
}
