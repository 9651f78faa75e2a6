package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/textclip"
)

// Grant is one acquisition the durable tier's audit log holds: a claim it
// answered ACQUIRED, written in the same transaction as the record.
type Grant struct {
	Key    string
	Token  uint64
	Holder string // the claimant's holder text: the load sends its attempt_id
	At     int64  // the service clock at the claim, unix nanoseconds
}

// Input is what a run hands to Check.
type Input struct {
	// Ops is every call of the run, the final probes included.
	Ops []Op
	// Grants is the durable audit log's acquisitions of the run's keys; nil
	// when it could not be read (the audit checks are then reported as not
	// run, never as passed).
	Grants []Grant
	// Unfinished names keys whose callers had not all finished when the
	// run's convergence bound passed.
	Unfinished []string
	// Replicas that the final probes must have asked about every settled key.
	Replicas []string
	// Grace bounds how long after a claim's decision the claim may still be
	// in flight in the server (its commit comes later than the audit's time
	// by at most this); default 2s.
	Grace time.Duration
	// KeyTimeout bounds the linearizability search of one key; default 10s.
	KeyTimeout time.Duration
	// VizDir receives porcupine's visualization of every key whose history
	// cannot be linearized; "" writes none.
	VizDir string
}

// Violation is one broken invariant.
type Violation struct {
	Check  string // one of the Check* names
	Key    string
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s: %s", v.Check, v.Key, v.Detail) }

// Names of the checks, as the report prints them.
const (
	CheckCode         = "retryable-codes"
	CheckOwnership    = "single-owner"
	CheckSettled      = "settled-once"
	CheckAttempt      = "attempt-recognised"
	CheckHolder       = "holder-named"
	CheckFinal        = "settled-stays-duplicate"
	CheckConverge     = "converges"
	CheckAudit        = "audit-matches"
	CheckLinearizable = "linearizable"
)

// Checks lists every check in report order, each with what it asserts.
var Checks = []struct{ Name, Asserts string }{
	{CheckCode, "every failed call carried UNAVAILABLE, DEADLINE_EXCEEDED or CANCELED"},
	{CheckOwnership, "no two callers ever held overlapping ownership of a key (ACQUIRED answer until the owner's Release or terminal Transition was sent), and no token was handed to two attempts"},
	{CheckSettled, "no key was settled with two tokens or two results, and every DUPLICATE carried the settled result"},
	{CheckAttempt, "a retry with the same attempt_id was recognised: one token per attempt, and an attempt the durable tier granted was never told IN_PROGRESS from a pending marker or held by itself (nor held by another once the grant had surely committed)"},
	{CheckHolder, "every IN_PROGRESS named its holder: none came from a pending marker, which sends a claim to the durable tier instead of answering it"},
	{CheckFinal, "every acknowledged SETTLED answered DUPLICATE with the same result at the end, on every replica"},
	{CheckConverge, "after the fault ended every key's callers finished (losers saw DUPLICATE) within the bound; a key held to the end by a grant whose every call failed for its caller is reported apart (its lease bounds it)"},
	{CheckAudit, "every ACQUIRED a caller was told is a grant in the durable audit log; a grant no caller saw belongs to a failed call of that attempt"},
	{CheckLinearizable, "each key's history linearizes against the claim register model (failed calls maybe applied)"},
}

// Result is what Check found.
type Result struct {
	Violations []Violation
	// Keys checked for linearizability, and the outcome of each search.
	Keys, Illegal, Unknown int
	// Visualizations maps an illegal key to its HTML file.
	Visualizations map[string]string
	// UnseenGrants counts grants no caller saw (allowed: a failed call's).
	UnseenGrants int
	// AuditChecked is false when no audit log was given.
	AuditChecked bool
	// Orphaned names keys left held by an orphaned grant (see orphanHolders)
	// at the end of the run: the lease bounds them, so they are reported
	// here instead of as convergence violations.
	Orphaned []string
}

// Check runs every check on in.
func Check(in Input) Result {
	if in.Grace <= 0 {
		in.Grace = 2 * time.Second
	}
	if in.KeyTimeout <= 0 {
		in.KeyTimeout = 10 * time.Second
	}
	keys := byKey(in.Ops)
	var grants map[string][]Grant
	if in.Grants != nil {
		grants = map[string][]Grant{}
		for _, g := range in.Grants {
			grants[g.Key] = append(grants[g.Key], g)
		}
	}
	res := Result{AuditChecked: in.Grants != nil}
	if in.Grants != nil {
		res.UnseenGrants = unseenGrants(in.Ops, in.Grants)
	}
	add := func(v ...Violation) { res.Violations = append(res.Violations, v...) }

	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ops := keys[k]
		add(checkCodes(ops)...)
		add(checkOwnership(k, ops)...)
		add(checkSettled(k, ops)...)
		add(checkAttempts(k, ops, grants[k], in.Grants != nil, in.Grace)...)
		add(checkHolder(k, ops)...)
		add(checkFinal(k, ops, in.Replicas)...)
		if in.Grants != nil {
			add(checkAudit(k, ops, grants[k])...)
		}
	}
	for _, k := range in.Unfinished {
		add(Violation{CheckConverge, k, "callers still waiting at the convergence bound"})
	}
	res.Violations = mergeConverge(res.Violations)
	if in.Grants != nil {
		res.Violations, res.Orphaned = excuseOrphans(res.Violations, keys, grants, in.Replicas)
	}
	lin := linearize(names, keys, grants, in)
	res.Keys, res.Illegal, res.Unknown, res.Visualizations = len(names), lin.illegal, lin.unknown, lin.viz
	add(lin.violations...)
	return res
}

// mergeConverge keeps one convergence violation per key (a stuck key fails
// its callers and its probe on every replica), joining the details.
func mergeConverge(vs []Violation) []Violation {
	out := vs[:0:0]
	at := map[string]int{}
	for _, v := range vs {
		if v.Check != CheckConverge {
			out = append(out, v)
			continue
		}
		if i, ok := at[v.Key]; ok {
			out[i].Detail += "; " + v.Detail
			continue
		}
		at[v.Key] = len(out)
		out = append(out, v)
	}
	return out
}

// orphanHolders names the attempts of one key that the durable tier granted
// while every Claim of theirs failed for its caller: the caller gave up on
// the call (its deadline, a closed connection) and went on as a new
// delivery, but the call still ran in the server and took the key over
// later, typically after waiting on a row lock while the holder of the time
// released it. Nothing in the server tells such a claim from a live one; the
// lease bounds it (cmd/chaos/NOTES.md, "a claim that runs after its own
// retry was answered"), and the run's lease is longer than the run.
func orphanHolders(ops []Op, grants []Grant) map[string]bool {
	failed, seen := map[string]bool{}, map[string]bool{}
	for _, o := range ops {
		if o.Kind != KindClaim || o.Probe {
			continue
		}
		switch {
		case !o.Answered():
			failed[o.AttemptID] = true
		case o.Outcome == pb.Outcome_OUTCOME_ACQUIRED:
			seen[o.AttemptID] = true
		}
	}
	out := map[string]bool{}
	for _, g := range grants {
		if failed[g.Holder] && !seen[g.Holder] {
			out[g.Holder] = true
		}
	}
	return out
}

// excuseOrphans takes the convergence violations of a key off the list when
// the key ended held by an orphaned grant: nothing settled it, and every
// replica's final probe answered IN_PROGRESS naming that grant's holder.
// Such keys are returned to be reported apart. Any other check on the key
// still stands.
func excuseOrphans(vs []Violation, keys map[string][]Op, grants map[string][]Grant, replicas []string) ([]Violation, []string) {
	stuck := map[string]bool{}
	for _, v := range vs {
		if v.Check == CheckConverge {
			stuck[v.Key] = true
		}
	}
	var orphaned []string
	for k := range stuck {
		if heldByOrphan(keys[k], grants[k], replicas) {
			orphaned = append(orphaned, k)
		}
	}
	if len(orphaned) == 0 {
		return vs, nil
	}
	sort.Strings(orphaned)
	excused := map[string]bool{}
	for _, k := range orphaned {
		excused[k] = true
	}
	out := vs[:0:0]
	for _, v := range vs {
		if v.Check == CheckConverge && excused[v.Key] {
			continue
		}
		out = append(out, v)
	}
	return out, orphaned
}

func heldByOrphan(ops []Op, grants []Grant, replicas []string) bool {
	orphans := orphanHolders(ops, grants)
	if len(orphans) == 0 {
		return false
	}
	last := map[string]*Op{}
	for i := range ops {
		o := &ops[i]
		if o.Kind == KindTransition && o.Code == codes.OK && o.To == pb.EventState_EVENT_STATE_SETTLED {
			return false // settled: a stuck probe is settled-stays-duplicate's, never excused
		}
		if o.Probe {
			last[o.Replica] = o
		}
	}
	held := false
	for _, r := range replicas {
		p := last[r]
		switch {
		case p == nil || p.Code != codes.OK:
			return false
		case p.Outcome == pb.Outcome_OUTCOME_IN_PROGRESS && orphans[p.AckHolder]:
			held = true
		default:
			return false
		}
	}
	return held
}

func checkCodes(ops []Op) []Violation {
	var out []Violation
	for _, o := range ops {
		if !o.Answered() && !o.Cutoff && !Retryable(o.Code) {
			out = append(out, Violation{CheckCode, o.Key, fmt.Sprintf("c%d %s on %s: %s", o.Client, o.requestString(), o.Replica, textclip.Cut(o.Message, maxReport))})
		}
	}
	return out
}

// ownership is one caller's hold of a token, from the ACQUIRED answer it
// got to the first call by which it gave the key up.
type ownership struct {
	client     int
	attempt    string
	token      uint64
	start, end int64
}

func checkOwnership(key string, ops []Op) []Violation {
	var out []Violation
	owners := map[[2]uint64]*ownership{} // (client, token)
	attempts := map[uint64]map[string]bool{}
	for _, o := range ops {
		if o.Kind != KindClaim || o.Code != codes.OK || o.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
			continue
		}
		if attempts[o.AckToken] == nil {
			attempts[o.AckToken] = map[string]bool{}
		}
		attempts[o.AckToken][o.AttemptID] = true
		id := [2]uint64{uint64(o.Client), o.AckToken}
		if w, ok := owners[id]; !ok || o.Complete < w.start {
			owners[id] = &ownership{client: o.Client, attempt: o.AttemptID, token: o.AckToken, start: o.Complete, end: math.MaxInt64}
		}
	}
	for t, as := range attempts {
		if len(as) > 1 {
			out = append(out, Violation{CheckOwnership, key, fmt.Sprintf("token %d was ACQUIRED by %d attempts: %s", t, len(as), strings.Join(sortedKeys(as), ", "))})
		}
	}
	for _, o := range ops {
		giveUp := o.Kind == KindRelease || (o.Kind == KindTransition && terminal(o.To))
		if !giveUp {
			continue
		}
		if w := owners[[2]uint64{uint64(o.Client), o.Token}]; w != nil && o.Invoke < w.end && o.Invoke >= w.start {
			w.end = o.Invoke
		}
	}
	list := make([]*ownership, 0, len(owners))
	for _, w := range owners {
		list = append(list, w)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
	for i, a := range list {
		for _, b := range list[i+1:] {
			if a.client != b.client && b.start < a.end && a.start < b.end {
				out = append(out, Violation{CheckOwnership, key, fmt.Sprintf("c%d held t%d (%s) while c%d was told ACQUIRED t%d (%s) %s later",
					a.client, a.token, a.attempt, b.client, b.token, b.attempt, time.Duration(b.start-a.start).Round(time.Microsecond))})
			}
		}
	}
	return out
}

func checkSettled(key string, ops []Op) []Violation {
	var out []Violation
	type settle struct {
		token  uint64
		result string
	}
	settles := map[settle]bool{}
	dups := map[string]bool{}
	for _, o := range ops {
		switch {
		case o.Kind == KindTransition && o.Code == codes.OK && o.To == pb.EventState_EVENT_STATE_SETTLED && o.AckState == pb.EventState_EVENT_STATE_SETTLED:
			settles[settle{o.AckToken, o.AckResult}] = true
		case o.Kind == KindClaim && o.Code == codes.OK && o.Outcome == pb.Outcome_OUTCOME_DUPLICATE:
			dups[o.AckResult] = true
		}
	}
	if len(settles) > 1 {
		var s []string
		for x := range settles {
			s = append(s, fmt.Sprintf("t%d %q", x.token, x.result))
		}
		sort.Strings(s)
		out = append(out, Violation{CheckSettled, key, "settled twice: " + strings.Join(s, ", ")})
	}
	for r := range dups {
		for x := range settles {
			if r != x.result {
				out = append(out, Violation{CheckSettled, key, fmt.Sprintf("DUPLICATE carried %q, settled with %q", r, x.result)})
			}
		}
	}
	if len(settles) == 0 && len(dups) > 1 {
		out = append(out, Violation{CheckSettled, key, fmt.Sprintf("DUPLICATE answers carried %d different results", len(dups))})
	}
	return out
}

func checkAttempts(key string, ops []Op, grants []Grant, audited bool, grace time.Duration) []Violation {
	var out []Violation
	tokens := map[string]map[uint64]bool{}
	note := func(attempt string, t uint64) {
		if tokens[attempt] == nil {
			tokens[attempt] = map[uint64]bool{}
		}
		tokens[attempt][t] = true
	}
	granted := map[string]int64{} // attempt → earliest grant time
	for _, g := range grants {
		note(g.Holder, g.Token)
		if at, ok := granted[g.Holder]; !ok || g.At < at {
			granted[g.Holder] = g.At
		}
	}
	for _, o := range ops {
		if o.Kind == KindClaim && o.Code == codes.OK && o.Outcome == pb.Outcome_OUTCOME_ACQUIRED {
			note(o.AttemptID, o.AckToken)
		}
	}
	for a, ts := range tokens {
		if len(ts) > 1 {
			out = append(out, Violation{CheckAttempt, key, fmt.Sprintf("attempt %s holds %d tokens", a, len(ts))})
		}
	}
	if !audited {
		return out
	}
	// An IN_PROGRESS to a granted attempt that comes from a pending marker
	// or names the attempt itself is the caller told IN_PROGRESS by itself,
	// whenever it happened: with an attempt_id, the durable tier would have
	// answered ACQUIRED (or UNAVAILABLE). One naming another holder is
	// wrong only once the grant had surely committed.
	for _, o := range ops {
		if o.Kind != KindClaim || o.Code != codes.OK || o.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS {
			continue
		}
		at, ok := granted[o.AttemptID]
		if !ok {
			continue
		}
		var src string
		switch {
		case o.AckHolder == "":
			src = "from a pending marker"
		case o.AckHolder == o.AttemptID:
			src = "held by itself"
		case o.Invoke > at+int64(grace):
			src = "held by " + o.AckHolder
		default:
			continue
		}
		out = append(out, Violation{CheckAttempt, key, fmt.Sprintf("c%d's retry of its own attempt %s, which the durable tier granted, was told IN_PROGRESS (%s) on %s, %s after the grant",
			o.Client, o.AttemptID, src, o.Replica, time.Duration(o.Invoke-at).Round(time.Millisecond))})
	}
	return out
}

// checkHolder flags every IN_PROGRESS that names no holder: one answered
// by a pending marker. claimd gave such answers until 2026-12-02 (the
// model's one relaxation); a marker now sends the claim to the durable tier,
// whose IN_PROGRESS names the holder.
func checkHolder(key string, ops []Op) []Violation {
	var out []Violation
	for _, o := range ops {
		if o.FromMarker() {
			out = append(out, Violation{CheckHolder, key, fmt.Sprintf("c%d's claim (attempt %s) was told IN_PROGRESS with no holder on %s", o.Client, o.AttemptID, o.Replica)})
		}
	}
	return out
}

func checkFinal(key string, ops []Op, replicas []string) []Violation {
	var out []Violation
	settled := ""
	for _, o := range ops {
		if o.Kind == KindTransition && o.Code == codes.OK && o.To == pb.EventState_EVENT_STATE_SETTLED && o.AckState == pb.EventState_EVENT_STATE_SETTLED {
			settled = o.AckResult
		}
	}
	last := map[string]*Op{}
	for i := range ops {
		if o := &ops[i]; o.Probe {
			last[o.Replica] = o
		}
	}
	for _, r := range replicas {
		p := last[r]
		switch {
		case p == nil:
			out = append(out, Violation{CheckFinal, key, "no final probe on " + r})
		case settled == "" && ordered(p):
			// An entity event the entity moved past, or one still waiting
			// for an event that never came: judged by the lifecycle checks.
		case p.Code != codes.OK || p.Outcome != pb.Outcome_OUTCOME_DUPLICATE:
			check := CheckConverge
			if settled != "" {
				check = CheckFinal
			}
			out = append(out, Violation{check, key, fmt.Sprintf("final probe on %s: %s", r, p.AnswerString())})
		case settled != "" && p.AckResult != settled:
			out = append(out, Violation{CheckFinal, key, fmt.Sprintf("final probe on %s: result %q, settled %q", r, p.AckResult, settled)})
		}
	}
	return out
}

func checkAudit(key string, ops []Op, grants []Grant) []Violation {
	var out []Violation
	byToken := map[uint64]Grant{}
	for _, g := range grants {
		byToken[g.Token] = g
	}
	seen := map[uint64]bool{}
	failedAttempts := map[string]bool{}
	for _, o := range ops {
		if o.Kind != KindClaim {
			continue
		}
		if !o.Answered() {
			failedAttempts[o.AttemptID] = true
			continue
		}
		if o.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
			continue
		}
		seen[o.AckToken] = true
		if _, ok := byToken[o.AckToken]; !ok {
			out = append(out, Violation{CheckAudit, key, fmt.Sprintf("c%d was told ACQUIRED t%d (%s) on %s; the audit log has no such grant", o.Client, o.AckToken, o.AttemptID, o.Replica)})
		}
	}
	for t, g := range byToken {
		if !seen[t] && !failedAttempts[g.Holder] {
			out = append(out, Violation{CheckAudit, key, fmt.Sprintf("the audit log grants t%d to %s, which no caller saw and no failed call explains", t, g.Holder)})
		}
	}
	return out
}

// unseenGrants counts grants no caller was told of (each explained by a
// failed call, or reported by checkAudit).
func unseenGrants(ops []Op, grants []Grant) int {
	seen := map[string]bool{}
	for _, o := range ops {
		if o.Kind == KindClaim && o.Code == codes.OK && o.Outcome == pb.Outcome_OUTCOME_ACQUIRED {
			seen[fmt.Sprintf("%s\x00%d", o.Key, o.AckToken)] = true
		}
	}
	n := 0
	counted := map[string]bool{}
	for _, g := range grants {
		id := fmt.Sprintf("%s\x00%d", g.Key, g.Token)
		if !seen[id] && !counted[id] {
			counted[id] = true
			n++
		}
	}
	return n
}

type linResult struct {
	illegal, unknown int
	viz              map[string]string
	violations       []Violation
}

// linearize checks each key's history with porcupine, two keys at a time.
func linearize(names []string, keys map[string][]Op, grants map[string][]Grant, in Input) linResult {
	res := linResult{viz: map[string]string{}}
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	model := Model()
	for range 2 {
		wg.Go(func() {
			for k := range work {
				ops := porcupineOps(keys[k], grants[k], grants != nil)
				r, info := porcupine.CheckOperationsVerbose(model, ops, in.KeyTimeout)
				mu.Lock()
				switch r {
				case porcupine.Illegal:
					res.illegal++
					detail := fmt.Sprintf("%d calls cannot be ordered by the claim register model", len(ops))
					if in.VizDir != "" {
						path := filepath.Join(in.VizDir, FileName(k)+".html")
						if err := porcupine.VisualizePath(model, info, path); err == nil {
							res.viz[k] = path
							detail += "; see " + path
						}
					}
					res.violations = append(res.violations, Violation{CheckLinearizable, k, detail})
				case porcupine.Unknown:
					res.unknown++
				}
				mu.Unlock()
			}
		})
	}
	if in.VizDir != "" {
		os.MkdirAll(in.VizDir, 0o755)
	}
	for _, k := range names {
		work <- k
	}
	close(work)
	wg.Wait()
	sort.Slice(res.violations, func(i, j int) bool { return res.violations[i].Key < res.violations[j].Key })
	return res
}

// porcupineOps turns a key's calls into porcupine's operations. A failed
// call may have taken effect at any time after it was invoked: it gets no
// output and a return time of never. Three reductions keep the search small
// and lose nothing:
//   - IN_PROGRESS from a pending marker is left out: holder-named reports
//     it, and left in it would fail the whole key's search, hiding whether
//     the rest of its history linearizes;
//   - a failed Claim of an attempt the audit log never granted changed
//     nothing (a grant is written in the same transaction as the record);
//   - of failed calls with identical requests only the first is kept: the
//     request is idempotent, and the first may be placed wherever a later
//     one could.
func porcupineOps(ops []Op, grants []Grant, audited bool) []porcupine.Operation {
	granted := map[string]bool{}
	for _, g := range grants {
		granted[g.Holder] = true
	}
	clients := map[int]int{}
	seenFailed := map[string]bool{}
	var out []porcupine.Operation
	for i := range ops {
		o := &ops[i]
		if o.FromMarker() {
			continue
		}
		ret, output := o.Complete, any(o)
		if !o.Answered() {
			if o.Kind == KindClaim && audited && !granted[o.AttemptID] {
				continue
			}
			id := fmt.Sprintf("%d|%s|%d|%d|%s", o.Kind, o.AttemptID, o.Token, o.To, o.Result)
			if seenFailed[id] {
				continue
			}
			seenFailed[id] = true
			ret, output = math.MaxInt64, (*Op)(nil)
		}
		c, ok := clients[o.Client]
		if !ok {
			c = len(clients)
			clients[o.Client] = c
		}
		out = append(out, porcupine.Operation{ClientId: c, Input: o, Call: o.Invoke, Output: output, Return: ret})
	}
	return out
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// FileName is key made safe as a file name.
func FileName(key string) string { return unsafeName.ReplaceAllString(key, "_") }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// maxReport bounds a message quoted in the report.
const maxReport = 160
