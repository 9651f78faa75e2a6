package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/claimd/claimd/internal/chaos"
)

// report is one run of the suite.
type report struct {
	Started, Finished time.Time
	Options           options
	Machine           string
	Scenarios         []scenarioResult
	Crash             []crashRow
}

// violations counts every violation of the run, crash rows included.
func (r *report) violations() int {
	n := 0
	for _, s := range r.Scenarios {
		n += len(s.Violations)
		if s.Err != "" {
			n++
		}
	}
	for _, c := range r.Crash {
		if !c.OK() {
			n++
		}
	}
	return n
}

func (r *report) failed() bool { return r.violations() > 0 }

// machine describes the host in one line.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d × %s, Linux %s, %s", runtime.NumCPU(), cpu, kernel, runtime.Version())
}

func recoverText(d time.Duration) string {
	if d < 0 {
		return "–"
	}
	return d.Round(time.Millisecond).String()
}

// byCheck counts a scenario's violations per check.
func byCheck(vs []chaos.Violation) string {
	if len(vs) == 0 {
		return "0"
	}
	m := map[string]int{}
	for _, v := range vs {
		m[v.Check]++
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return fmt.Sprintf("**%d** (%s)", len(vs), strings.Join(parts, ", "))
}

// print writes the table to the terminal.
func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\ttiers\tkeys\tcalls\terrors by code\tviolations\trecover")
	for _, s := range r.Scenarios {
		v := strings.ReplaceAll(byCheck(s.Violations), "**", "")
		if s.Err != "" {
			v += " + error: " + s.Err
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Mode, s.Keys, s.Calls, sortedCodes(s.Errors), v, recoverText(s.Recover))
	}
	tw.Flush()
	if len(r.Crash) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "crash point\ttiers\tholds\tsteps")
		for _, c := range r.Crash {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", c.Point, c.Mode, c.OK(), c.summary(false))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\n%d violations\n", r.violations())
}

// summary renders a crash row's steps.
func (c crashRow) summary(md bool) string {
	if c.Err != "" {
		return "error: " + c.Err
	}
	var parts []string
	for _, s := range c.Steps {
		mark := "ok"
		if !s.OK {
			mark = "VIOLATION, required: " + s.Want
			if md {
				mark = "**VIOLATION**, required: " + s.Want
			}
		}
		parts = append(parts, fmt.Sprintf("%s on %s: %s (%s)", s.Who, s.Replica, s.Got, mark))
	}
	return strings.Join(parts, "; ")
}

// maxListed bounds the violations listed per scenario.
const maxListed = 12

// writeMarkdown writes RELIABILITY.md.
func (r *report) writeMarkdown(path string) error {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	o := r.Options
	p("# Reliability\n\n")
	p("<!-- Written by `make chaos` (scripts/chaos.sh → cmd/chaos); change the suite, not this file. -->\n\n")
	p("claimd under faults, measured %s on %s; the run took %s.\n\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Finished.Sub(r.Started).Round(time.Second))
	p("Command: `%s`\n\n", o.command)
	if n := r.violations(); n == 0 {
		p("**Verdict: 0 violations** in every scenario and every row of the crash-point matrix.\n\n")
	} else {
		p("**Verdict: %d violations** (listed below; `make chaos` exits 1).\n\n", n)
	}

	p("## Scenarios\n\n")
	p("Each scenario starts fresh replicas (%d claimd on one Redis and one PostgreSQL, or one embedded claimd on SQLite) and a fresh database. ", o.replicas)
	p("Load: %d keys in flight, %d callers racing on each (%d callers), each call to a random replica; every delivery claims with an attempt_id of its own and retries its own failed calls with it; ", o.groups, o.racers, o.groups*o.racers)
	p("the owner moves the key to PROCESSING and then SETTLED with a result (%.0f%% of owners Release instead, handing the key to a loser); a loser answered IN_PROGRESS comes back as a new delivery until it sees DUPLICATE. ", o.releaseRate*100)
	p("Keys are started for %s (%d at most); the fault begins at a third of that and lasts about %s (a restart may take longer); once the load and the fault have both ended, every key's callers have %s to finish and every key is probed on every replica. ", o.duration, o.maxKeys, max(time.Second, o.duration/6), o.converge)
	p("The provider's lease is 1h, longer than the run, so no lease ends by itself. ")
	p("The `lifecycle-*` scenarios drive entity events instead (see Lifecycles); their keys are the events' ids. ")
	p("*Time to recover*: from the end of the fault (restart done, window closed) to the last failed call.\n\n")
	p("| scenario | tiers | fault | keys | calls | errors by code | violations | time to recover |\n")
	p("| --- | --- | --- | ---: | ---: | --- | --- | ---: |\n")
	for _, s := range r.Scenarios {
		v := byCheck(s.Violations)
		if s.Err != "" {
			v += "; **could not run**: " + s.Err
		}
		fault := s.Fault
		if s.Dropped > 0 {
			fault += fmt.Sprintf(" (%d replies lost)", s.Dropped)
		}
		p("| %s | %s | %s | %d | %d | %s | %s | %s |\n", s.Name, s.Mode, fault, s.Keys, s.Calls, sortedCodes(s.Errors), v, recoverText(s.Recover))
	}
	p("\n")

	if r.violations() > 0 {
		p("### Violations\n\n")
		for _, s := range r.Scenarios {
			if len(s.Violations) == 0 && s.Err == "" {
				continue
			}
			p("**%s** (%d):\n\n", s.Name, len(s.Violations))
			for i, v := range s.Violations {
				if i == maxListed {
					p("- … and %d more\n", len(s.Violations)-maxListed)
					break
				}
				p("- `%s` %s: %s\n", v.Check, v.Key, mdEscape(v.Detail))
			}
			if s.Err != "" {
				p("- could not run: %s\n", mdEscape(s.Err))
			}
			p("\n")
		}
	}

	r.writeLifecycles(p)

	p("## Linearizability\n\n")
	p("Each key's history (its calls with invoke and complete times) is checked with [porcupine](https://github.com/anishathalye/porcupine) against the claim-register model below, with a bound of 10 s per key. ")
	p("Keys that cannot be ordered are named above (`linearizable`) and their visualizations are written to `%s/<scenario>/<key>.html` (not committed: open them after a run).\n\n", o.vizDir)
	p("*Held by an orphan*: keys that ended held by a grant whose every call had failed for its caller (a claim that ran on in the server after its caller gave up and took the key over later; see the analysis). Nothing settles them before their lease ends, so they are listed here instead of as `converges` violations; every other check still judges them.\n\n")
	p("| scenario | keys checked | cannot be ordered | search timed out | grants no caller saw (failed calls') | held by an orphan |\n| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, s := range r.Scenarios {
		unseen, orphaned := "not read", "not read"
		if s.Check.AuditChecked {
			unseen, orphaned = fmt.Sprint(s.Check.UnseenGrants), "0"
			if len(s.Check.Orphaned) > 0 {
				orphaned = fmt.Sprintf("%d (%s)", len(s.Check.Orphaned), strings.Join(s.Check.Orphaned, ", "))
			}
		}
		p("| %s | %d | %d | %d | %s | %s |\n", s.Name, s.Check.Keys, s.Check.Illegal, s.Check.Unknown, unseen, orphaned)
	}
	p("\n")

	if len(r.Crash) > 0 {
		p("## Crash-point matrix\n\n")
		p("claimd is killed (SIGKILL to itself, as kill -9) at a named point of one key's call; it is restarted, and the deliveries after it must see what the row requires. ")
		p("In production mode A is the owner, r0 the replica that died and r1 the other one; embedded, r0 is restarted on the same data dir and takes every call. ")
		p("Where a kill leaves the fast tier stale (the durable commit happened, the refresh did not), the next delivery may be told IN_PROGRESS — retryable, never a false DUPLICATE or a second ACQUIRED — until the owner retries its own call, which must repair it.\n\n")
		p("| tiers | killed | deliveries after the restart | holds |\n| --- | --- | --- | --- |\n")
		for _, c := range r.Crash {
			holds := "yes"
			if !c.OK() {
				holds = "**no**"
			}
			p("| %s | %s | %s | %s |\n", c.Mode, c.Killed, mdEscape(c.summary(true)), holds)
		}
		p("\n")
	}

	if b, err := os.ReadFile(o.notes); err == nil {
		p("## Analysis\n\n%s\n\n", strings.TrimSpace(string(b)))
	}
	p("## What is checked\n\n")
	p("Every scenario's history goes through the checks of the claim register; a lifecycle scenario's goes through those and the lifecycle checks. Each check in one sentence, then precisely:\n\n")
	p("| check | in one sentence | precisely |\n| --- | --- | --- |\n")
	for _, c := range chaos.Checks {
		p("| `%s` | %s | %s |\n", c.Name, plainCheck[c.Name], c.Asserts)
	}
	for _, c := range chaos.LifecycleChecks {
		p("| `%s` | %s | %s |\n", c.Name, plainCheck[c.Name], c.Asserts)
	}
	p("\n")
	p("## What is not covered\n\n")
	for _, line := range notCovered {
		p("- %s\n", line)
	}
	p("\n")
	p("## The model\n\n")
	p("The model is one key's claim register (DESIGN §2, `tiers.Decide`) with a lease longer than the run: absent → ACQUIRED t1; terminal → DUPLICATE with the settled result; the holder's own attempt_id → the same ACQUIRED and token; released → ACQUIRED with token+1; otherwise IN_PROGRESS naming the holder. ")
	p("Transition and Release are fenced by token (STALE_TOKEN, INVALID_TRANSITION, a repeat answers changed=false). ")
	p("A call that failed may or may not have taken effect: it has no output and never returns, so the checker may place it anywhere after its invocation (a failed Claim whose attempt the audit log never granted changed nothing and is left out).\n\n")
	p("**No relaxation.** Until 2026-12-02 a Claim that met another claim's pending marker in the fast tier was answered IN_PROGRESS with no holder, and the model accepted that in every state. A marker now sends the claim to the durable tier, so every IN_PROGRESS names its holder: one that does not is a violation of its own (`holder-named`), left out of the linearizability search so the rest of its key's history is still judged. ")
	p("Also forbidden: an IN_PROGRESS that names a holder on a settled key (a stale fast tier), and any IN_PROGRESS to a caller's retry of its own attempt once the durable tier granted it (`attempt-recognised`, after a grace of 2 s for the granting call still in flight).\n\n")
	p("## How the faults are made\n\n")
	p("- Redis: FLUSHALL through a client; kill -9 of redis-server by PID, restarted empty on the same port.\n")
	p("- PostgreSQL (fsync and synchronous_commit on): SIGQUIT to the postmaster, which is what `pg_ctl -m immediate` sends (no checkpoint; crash recovery at the restart).\n")
	p("- Replicas: kill -9 by PID, restarted on the same ports (embedded: the same data dir).\n")
	p("- Short deadlines: each call's deadline drawn from 0.1–3 ms, so the server often commits after the caller gave up.\n")
	p("- Lost replies: an in-process TCP proxy before r0 reads HTTP/2 frame headers, dooms a new stream at the set rate, forwards its request, swallows the first frame of the server's answer and closes both connections (every call in flight on it fails UNAVAILABLE, applied or not).\n")
	p("- Crash points: claimd built with `-tags chaos` (scripts/chaos.sh) wraps its tiers in `cmd/claimd/crashpoint_chaos.go` and SIGKILLs itself at `CLAIMD_CHAOS_CRASH=<point>:<key>`; the production build compiles the no-op in `crashpoint.go`. A signal from outside cannot hit the moment between a durable commit and the reply; a build tag keeps the hook out of every production binary.\n")
	p("- Every process the suite starts (Redis, PostgreSQL, each claimd) is stopped by its PID and killed by the kernel if the suite dies; everything listens on loopback only.\n")
	return os.WriteFile(path, []byte(w.String()), 0o644)
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// writeLifecycles writes the section of the lifecycle scenarios, if any ran.
func (r *report) writeLifecycles(p func(string, ...any)) {
	var rows []scenarioResult
	for _, s := range r.Scenarios {
		if s.Lifecycle != nil {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	p("## Lifecycles\n\n")
	p("The `lifecycle-*` scenarios deliver the events of Stripe payment intents and charges, with the lifecycles of the shipped providers.yaml (copied node for node into the suite's provider, whose lease is 1h). ")
	p("For each entity the provider's side is a walk of its lifecycle from the first state along declared events, 1–6 events long (a payment intent may fail and be paid again; a charge may be refunded and disputed). ")
	p("Each event is delivered 1–3 times (duplicates), every delivery starting at a random moment of the first 30 ms, so they arrive out of order and race across replicas. ")
	p("A delivery behaves like a handler: Claim with entity_id, event_type and start; on ACQUIRED it applies the event (the model records the application and the state the answer says it came from) and moves it to SETTLED; on DEFERRED or IN_PROGRESS the provider redelivers it 20–80 ms later as a new delivery, and after 30%% of DEFERRED answers someone reads ListDeferred; DUPLICATE and SUPERSEDED end it; a failed call is retried with the same attempt_id. ")
	p("Once the load has stopped, an event whose entity nothing else moves any more for 1 s while it waits for an event that was never sent (a second payment_failed, say) is given up, as the provider's retry horizon would: it is counted as *waiting*, and the checks require that its entity's state still allows it. ")
	p("After the callers finish, every entity is read with GetEntity and ListDeferred on every replica, and every event is claimed again on every replica. ")
	p("The faults are the same as in the scenarios of the same name above.\n\n")
	p("| scenario | entities | events | applied | superseded | waiting | DEFERRED answers | ready rows seen | EntityService reads | violations | held by an orphan |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, s := range rows {
		lr := s.Lifecycle
		var lv []chaos.Violation
		for _, v := range s.Violations {
			for _, c := range chaos.LifecycleChecks {
				if v.Check == c.Name {
					lv = append(lv, v)
				}
			}
		}
		orphaned := "0"
		if len(lr.HeldByOrphan) > 0 {
			orphaned = fmt.Sprintf("%d (%s)", len(lr.HeldByOrphan), strings.Join(lr.HeldByOrphan, ", "))
		}
		p("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", s.Name, lr.Entities, lr.Events, lr.Applied, lr.Superseded,
			lr.Waiting, lr.DeferredAnswers, lr.ReadyRows, lr.Reads, byCheck(lv), orphaned)
	}
	p("\n")
	p("The claim-register checks (including `linearizable`) judge every event's key as well; in the register model a DEFERRED or SUPERSEDED answer is one the key alone would have answered ACQUIRED (it is absent or released), and it leaves the record as it was. ")
	p("*Held by an orphan*: an entity held to the end by an orphaned grant (see Linearizability): its other events wait for that grant's lease, so their convergence is not required; every other check still judges them.\n\n")
}

// plainCheck says what each check protects, in a sentence a reviewer can
// follow without the model.
var plainCheck = map[string]string{
	chaos.CheckCode:         "When claimd fails a call, it fails it in a way the caller may simply retry; it never answers an error that would make a handler drop the event.",
	chaos.CheckOwnership:    "Two deliveries of one event are never both told to go ahead at the same time, so a side effect never runs twice concurrently.",
	chaos.CheckSettled:      "An event is settled once, with one result, and every later delivery is given that result.",
	chaos.CheckAttempt:      "A handler that retries its own call after a lost reply is recognised as the owner it already is, never told to wait for itself.",
	chaos.CheckHolder:       "When claimd says an event is being processed, it says by whom.",
	chaos.CheckFinal:        "Once a handler was told its settle succeeded, every replica answers later deliveries with DUPLICATE and that result.",
	chaos.CheckConverge:     "After the fault is over, every event gets settled and every waiting delivery learns so within the bound.",
	chaos.CheckAudit:        "Every time a caller was told it owns an event, the durable audit log says so too, and nothing was granted that no caller can account for.",
	chaos.CheckLinearizable: "Everything callers were told about one event could have happened in one order, one call at a time, as the specification's state machine would answer it.",
	chaos.CheckAppliedOnce:  "No event of an entity is applied twice: at most one delivery of it is ever told to go ahead.",
	chaos.CheckEventEnds:    "No event is lost: after the faults, each one was either applied or deliberately skipped as stale (SUPERSEDED).",
	chaos.CheckOrder:        "An entity's events are applied one at a time and in an order its lifecycle allows, each from the state the previous one left it in.",
	chaos.CheckOrdered:      "When claimd makes an event wait or skips it, the entity's state at that moment justifies it.",
	chaos.CheckReady:        "An event that waits is shown ready as soon as what it waited for is settled, and none is left waiting when it could have been applied.",
	chaos.CheckEntity:       "Every replica reports each entity exactly as the model has it: the same state and the same applied events in the same order.",
}

// notCovered lists what the suite does not exercise, so that a reader
// knows what 0 violations does not say.
var notCovered = []string{
	"**Leases and windows that end.** Every lease is 1h, longer than any run, so takeovers after a lease ends (LEASE_EXPIRED), entities freed by a lease's end, and replays after the dedup window (WINDOW_EXPIRED) never happen; the models know no time.",
	"**Release and FAILED in lifecycles.** Lifecycle handlers always settle; an entity freed by a Release or a FAILED transition is covered by the tiers' tests, not under faults. The claim-register scenarios do Release.",
	"**Lifecycles under every fault.** The lifecycle scenarios run in production mode under a replica kill, a PostgreSQL stop, a Redis flush and lost replies; not under a Redis kill, short deadlines or in embedded mode (the embedded crash-point rows are the exception).",
	"**Events the provider never sends.** An event waiting for one that never comes is counted as waiting (its entity's state must still allow it); the suite never reaches the retry horizon, so `lost` is never shown, and `retry_after` is not honoured (redeliveries come after 20–80 ms).",
	"**Raw deliveries.** Callers send event_id, entity_id and event_type; reading them from a raw body by the provider's rules is covered by unit tests only. Only Stripe's lifecycles are driven (not Adyen's).",
	"**Other faults.** No network partition between claimd and its stores (only processes killed or stopped), no clock skew or jumps, no full or slow disk, no PostgreSQL failover to a standby, no Redis Sentinel or Cluster, no memory pressure or Redis eviction.",
	"**Other paths.** Calls go over plaintext gRPC on loopback without authentication: the HTTP gateway, TLS, tokens and rate limits are in no scenario, and what prune and the janitor remove is not checked under faults.",
	"**Scale.** Two replicas, a few dozen callers and a few thousand keys per scenario on a small shared machine: contention at production rates is measured in BENCHMARKS.md, not here.",
}
