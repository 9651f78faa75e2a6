package tierstest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// The inspect cases hold every Store to the contract of tiers.Inspector.
// inspectCases run in Run: what they assert is decided by the durable tier
// whatever is in front of it (acquisitions, transitions, renews, releases
// and the records themselves). durableInspectCases run in RunDurable only:
// the audit rows of claims a fast tier or the local cache may answer
// without the durable tier (DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH).

var inspectCases = []struct {
	desc string
	run  func(t *testing.T, e *env)
}{
	{"inspect: ListClaims lists newest first, filtered, a page at a time", testListClaims},
	{"inspect: a ListClaims cursor belongs to its filter", testListClaimsCursor},
	{"inspect: ListAudit lists a key's writes oldest first, with who asked", testListAuditWrites},
}

var durableInspectCases = []struct {
	desc string
	run  func(t *testing.T, d tiers.Durable, e *env)
}{
	{"inspect: ListAudit lists every claim answered, pages, and refuses another key's cursor", testListAuditClaims},
	{"inspect: a claim turned away by its entity is audited with the key's record as it stands", testListAuditOrdered},
}

// inspector is the store's tiers.Inspector.
func (e *env) inspector() tiers.Inspector {
	e.t.Helper()
	in, ok := e.store.(tiers.Inspector)
	if !ok {
		e.t.Fatalf("%T does not implement tiers.Inspector", e.store)
	}
	return in
}

// atMicro moves the suite's clock to a whole microsecond, the stores'
// precision, so that times read back equal the clock's.
func (e *env) atMicro() time.Time {
	e.clk.Set(e.clk.Now().Truncate(time.Microsecond))
	return e.clk.Now()
}

// listAll pages through ListClaims(f) with pages of size, and returns the
// canonical keys in order (provider/key) and the records.
func (e *env) listAll(f tiers.ClaimFilter, size int) ([]string, []tiers.Record) {
	e.t.Helper()
	var (
		keys []string
		recs []tiers.Record
		pg   = tiers.Page{Size: size}
	)
	for page := 0; ; page++ {
		got, next, err := e.inspector().ListClaims(e.ctx(), f, pg)
		if err != nil {
			e.t.Fatalf("ListClaims(%+v, page %d) error = %v", f, page, err)
		}
		if len(got) > size || (next != "" && len(got) != size) {
			e.t.Fatalf("ListClaims(%+v, page %d) = %d records, next %q; want at most %d, a full page before a next one", f, page, len(got), next, size)
		}
		for _, r := range got {
			keys = append(keys, r.Key.Provider+"/"+r.Key.Key)
		}
		recs = append(recs, got...)
		if next == "" {
			return keys, recs
		}
		if page > 20 {
			e.t.Fatalf("ListClaims(%+v) never ends: %q", f, keys)
		}
		pg.After = next
	}
}

func testListClaims(t *testing.T, e *env) {
	t0 := e.atMicro()
	claimAt := func(at time.Time, k tiers.Key) tiers.ClaimResult {
		e.clk.Set(at)
		p := e.params(k.Key)
		p.Key = k
		return e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	}
	paypal := func(k string) tiers.Key { return tiers.Key{Namespace: e.ns, Provider: "paypal", Key: k} }
	claimAt(t0, e.key("evt_a"))
	b := claimAt(t0.Add(time.Second), e.key("evt_b"))
	claimAt(t0.Add(2*time.Second), e.key("evt_c"))
	// Three records of one instant: ordered by provider, then key,
	// descending.
	claimAt(t0.Add(3*time.Second), paypal("evt_d"))
	claimAt(t0.Add(3*time.Second), e.key("evt_e"))
	claimAt(t0.Add(3*time.Second), e.key("evt_g"))
	p := e.event("evt_f", "pi_1", evProcessing)
	e.clk.Set(t0.Add(4 * time.Second))
	p.Now = e.clk.Now()
	e.acquire(p, piInitial)
	// Another namespace's record is never listed.
	claimAt(t0.Add(5*time.Second), tiers.Key{Namespace: e.ns + "-other", Provider: "stripe", Key: "evt_a"})
	e.mustTransition("evt_b", ownerOf(b.Record), tiers.StateProcessing, tiers.StateSettled)

	all := []string{"stripe/evt_f", "stripe/evt_g", "stripe/evt_e", "paypal/evt_d", "stripe/evt_c", "stripe/evt_b", "stripe/evt_a"}
	for _, tc := range []struct {
		desc string
		f    tiers.ClaimFilter
		want []string
	}{
		{"everything", tiers.ClaimFilter{}, all},
		{"one provider", tiers.ClaimFilter{Provider: "paypal"}, []string{"paypal/evt_d"}},
		{"keys of a provider", tiers.ClaimFilter{Provider: "stripe", Keys: []string{"evt_a", "evt_c", "evt_d", "evt_never"}},
			[]string{"stripe/evt_c", "stripe/evt_a"}},
		{"a state", tiers.ClaimFilter{States: []tiers.State{tiers.StateSettled}}, []string{"stripe/evt_b"}},
		{"states", tiers.ClaimFilter{States: []tiers.State{tiers.StateSettled, tiers.StateReceived}, Provider: "stripe"},
			[]string{"stripe/evt_f", "stripe/evt_g", "stripe/evt_e", "stripe/evt_c", "stripe/evt_b", "stripe/evt_a"}},
		{"an entity", tiers.ClaimFilter{EntityID: "pi_1"}, []string{"stripe/evt_f"}},
		{"first seen in [t0+1s, t0+3s)", tiers.ClaimFilter{FirstSeenAfter: t0.Add(time.Second), FirstSeenBefore: t0.Add(3 * time.Second)},
			[]string{"stripe/evt_c", "stripe/evt_b"}},
		{"bounds inside a microsecond count from the next one", tiers.ClaimFilter{
			FirstSeenAfter: t0.Add(time.Second - time.Nanosecond), FirstSeenBefore: t0.Add(3*time.Second - time.Nanosecond)},
			[]string{"stripe/evt_c", "stripe/evt_b"}},
		{"nothing matches", tiers.ClaimFilter{Provider: "stripe", States: []tiers.State{tiers.StateFailed}}, nil},
	} {
		tc.f.Namespace = e.ns
		for _, size := range []int{1, 2, 100} {
			keys, recs := e.listAll(tc.f, size)
			if diff := cmp.Diff(tc.want, keys); diff != "" {
				t.Errorf("ListClaims(%s, pages of %d) keys (-want +got):\n%s", tc.desc, size, diff)
			}
			for _, r := range recs {
				got, err := e.store.Get(e.ctx(), r.Key)
				if err != nil {
					t.Fatalf("Get(%v) error = %v", r.Key, err)
				}
				if diff := cmp.Diff(got, r); diff != "" {
					t.Errorf("ListClaims(%s) record %v differs from Get's (-get +listed):\n%s", tc.desc, r.Key, diff)
				}
			}
		}
	}
	// A page of 0 is the default page: everything here fits in one.
	recs, next, err := e.inspector().ListClaims(e.ctx(), tiers.ClaimFilter{Namespace: e.ns}, tiers.Page{})
	if err != nil || len(recs) != len(all) || next != "" {
		t.Fatalf("ListClaims(page size 0) = %d records, next %q, %v; want %d, no next page", len(recs), next, err, len(all))
	}
}

func testListClaimsCursor(t *testing.T, e *env) {
	e.atMicro()
	for _, k := range []string{"evt_1", "evt_2", "evt_3"} {
		e.clk.Advance(time.Second)
		e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
	}
	f := tiers.ClaimFilter{Namespace: e.ns, Provider: "stripe"}
	_, next, err := e.inspector().ListClaims(e.ctx(), f, tiers.Page{Size: 1})
	if err != nil || next == "" {
		t.Fatalf("ListClaims(page of 1) next %q, %v; want a next page", next, err)
	}
	for _, tc := range []struct {
		desc   string
		f      tiers.ClaimFilter
		cursor string
	}{
		{"another provider", tiers.ClaimFilter{Namespace: e.ns, Provider: "paypal"}, next},
		{"another namespace", tiers.ClaimFilter{Namespace: e.ns + "-other", Provider: "stripe"}, next},
		{"a state added", tiers.ClaimFilter{Namespace: e.ns, Provider: "stripe", States: []tiers.State{tiers.StateReceived}}, next},
		{"keys added", tiers.ClaimFilter{Namespace: e.ns, Provider: "stripe", Keys: []string{"evt_1"}}, next},
		{"a bound added", tiers.ClaimFilter{Namespace: e.ns, Provider: "stripe", FirstSeenAfter: e.clk.Now().Add(-time.Hour)}, next},
		{"not base64", f, "!!not a cursor!!"},
		{"truncated", f, next[:4]},
		{"a ListDeferred-shaped cursor", f, "MTcwMDAwMDAwMDAwMDAwMDA6ZXZ0XzE"},
	} {
		recs, _, err := e.inspector().ListClaims(e.ctx(), tc.f, tiers.Page{Size: 1, After: tc.cursor})
		wantErr(t, "ListClaims("+tc.desc+")", err, tiers.ErrInvalidCursor)
		if recs != nil {
			t.Errorf("ListClaims(%s) = %d records with the error, want none", tc.desc, len(recs))
		}
	}
	// The same filter, with its keys and states in another order, is the
	// same listing.
	g := tiers.ClaimFilter{Namespace: e.ns, Provider: "stripe", Keys: []string{"evt_3", "evt_1", "evt_2"},
		States: []tiers.State{tiers.StateSettled, tiers.StateReceived}}
	_, next, err = e.inspector().ListClaims(e.ctx(), g, tiers.Page{Size: 1})
	if err != nil || next == "" {
		t.Fatalf("ListClaims(keys, page of 1) next %q, %v; want a next page", next, err)
	}
	g.Keys, g.States = []string{"evt_1", "evt_2", "evt_3"}, []tiers.State{tiers.StateReceived, tiers.StateSettled}
	recs, _, err := e.inspector().ListClaims(e.ctx(), g, tiers.Page{Size: 5, After: next})
	if err != nil || len(recs) != 2 || recs[0].Key.Key != "evt_2" || recs[1].Key.Key != "evt_1" {
		t.Fatalf("ListClaims(reordered filter, after page 1) = %v, %v; want evt_2, evt_1", recs, err)
	}
}

// actor is who asked, for the audit cases.
func actor(principal, transport string) tiers.Actor {
	return tiers.Actor{Principal: principal, Transport: transport}
}

// audit lists k's whole audit log in pages of size.
func (e *env) audit(k string, size int) []tiers.AuditEntry {
	e.t.Helper()
	var (
		all []tiers.AuditEntry
		pg  = tiers.Page{Size: size}
	)
	for page := 0; ; page++ {
		got, next, err := e.inspector().ListAudit(e.ctx(), e.key(k), pg)
		if err != nil {
			e.t.Fatalf("ListAudit(%q, page %d) error = %v", k, page, err)
		}
		if len(got) > size || (next != "" && len(got) != size) {
			e.t.Fatalf("ListAudit(%q, page %d) = %d entries, next %q; want at most %d, a full page before a next one", k, page, len(got), next, size)
		}
		all = append(all, got...)
		if next == "" {
			return all
		}
		if page > 50 {
			e.t.Fatalf("ListAudit(%q) never ends", k)
		}
		pg.After = next
	}
}

// testListAuditWrites audits a key's life through its writes, each asked
// by someone else over another transport: the first claim, a transition,
// a renew, a takeover after the lease ran out (LEASE_EXPIRED), a settle
// whose result an effect fence supplied, and a release of another key. A
// repeated transition and a refused one write nothing.
func testListAuditWrites(t *testing.T, e *env) {
	t0 := e.atMicro()
	const k = "evt_audit"
	p := e.params(k)
	p.PayloadHash = sha("payload")
	p.Actor = actor("alice", "grpc")
	first := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	own := ownerOf(first.Record)

	e.clk.Advance(time.Second)
	if _, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: e.key(k), Now: e.clk.Now(), Token: own.token, SecretHash: own.hash,
		To: tiers.StateProcessing, Actor: actor("alice", "http-rest")}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	if _, err := e.store.Renew(e.ctx(), tiers.RenewParams{Key: e.key(k), Now: e.clk.Now(), Token: own.token, SecretHash: own.hash,
		Lease: lease, Actor: actor("alice", "connect")}); err != nil {
		t.Fatal(err)
	}
	// A refused write (not the owner) is not audited.
	if _, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: e.key(k), Now: e.clk.Now(), Token: own.token, SecretHash: secretHash(),
		To: tiers.StateSettled, Actor: actor("mallory", "grpc")}); err == nil {
		t.Fatal("Transition by a stranger succeeded")
	}
	renewedAt := e.clk.Now()

	e.clk.Advance(lease + time.Second)
	q := e.params(k)
	q.Holder, q.Actor = "pod-b", actor("bob", "grpc-web")
	took := e.mustOutcome(q, tiers.OutcomeAcquired, tiers.ReasonLeaseExpired)
	tookAt := e.clk.Now()
	e.clk.Advance(time.Second)
	settle := tiers.TransitionParams{Key: e.key(k), Now: e.clk.Now(), Token: took.Record.Token, SecretHash: took.Record.SecretHash,
		To: tiers.StateSettled, Result: []byte("r"), EffectRecovered: true, Actor: actor("bob", "grpc")}
	if _, _, err := e.store.Transition(e.ctx(), settle); err != nil {
		t.Fatal(err)
	}
	settle.Now = settle.Now.Add(time.Second)
	if _, changed, err := e.store.Transition(e.ctx(), settle); err != nil || changed {
		t.Fatalf("repeated settle = changed %v, %v; want a no-op", changed, err)
	}

	// Another key of the namespace, released: its log is its own.
	rel := e.params("evt_released")
	rel.Actor = actor("carol", "grpc")
	r := e.mustOutcome(rel, tiers.OutcomeAcquired, tiers.ReasonNew)
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: e.key("evt_released"), Now: e.clk.Now(), Token: r.Record.Token,
		SecretHash: r.Record.SecretHash, Actor: actor("carol", "http-rest")}); err != nil {
		t.Fatal(err)
	}

	want := []tiers.AuditEntry{
		{At: t0, Op: tiers.AuditClaim, Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, State: tiers.StateReceived, Token: 1,
			Holder: "pod-a", Actor: actor("alice", "grpc"), PayloadHash: sha("payload")},
		{At: t0.Add(time.Second), Op: tiers.AuditTransition, State: tiers.StateProcessing, Token: 1, Holder: "pod-a", Actor: actor("alice", "http-rest")},
		{At: renewedAt, Op: tiers.AuditRenew, State: tiers.StateProcessing, Token: 1, Holder: "pod-a", Actor: actor("alice", "connect")},
		{At: tookAt, Op: tiers.AuditClaim, Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonLeaseExpired, State: tiers.StateProcessing, Token: 2,
			Holder: "pod-b", Actor: actor("bob", "grpc-web")},
		{At: tookAt.Add(time.Second), Op: tiers.AuditTransition, State: tiers.StateSettled, Token: 2, Holder: "pod-b", Actor: actor("bob", "grpc"),
			EffectRecovered: true},
	}
	for _, size := range []int{1, 2, 100} {
		if diff := cmp.Diff(want, e.audit(k, size)); diff != "" {
			t.Errorf("ListAudit(%q, pages of %d) (-want +got):\n%s", k, size, diff)
		}
	}
	wantRel := []tiers.AuditEntry{
		{At: e.clk.Now(), Op: tiers.AuditClaim, Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, State: tiers.StateReceived, Token: 1,
			Holder: "pod-a", Actor: actor("carol", "grpc")},
		{At: e.clk.Now(), Op: tiers.AuditRelease, State: tiers.StateReceived, Token: 1, Holder: "pod-a", Actor: actor("carol", "http-rest")},
	}
	if diff := cmp.Diff(wantRel, e.audit("evt_released", 1)); diff != "" {
		t.Errorf("ListAudit(evt_released) (-want +got):\n%s", diff)
	}
	// A key never claimed has an empty log, not an error.
	if got, next, err := e.inspector().ListAudit(e.ctx(), e.key("evt_never"), tiers.Page{}); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("ListAudit(never claimed) = %v, %q, %v; want nothing", got, next, err)
	}
}

// testListAuditClaims audits the claims the durable tier answers without
// writing a record: IN_PROGRESS, PAYLOAD_MISMATCH, DUPLICATE and DEFERRED,
// each with the claimant's holder, actor and payload hash; then pages
// through a long log and refuses a cursor of another key.
func testListAuditClaims(t *testing.T, _ tiers.Durable, e *env) {
	t0 := e.atMicro()
	const k = "evt_claims"
	a := e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.clk.Advance(time.Second)
	busy := e.params(k)
	busy.Holder, busy.Actor = "pod-b", actor("bob", "grpc")
	e.mustOutcome(busy, tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	e.mustTransition(k, ownerOf(a.Record), tiers.StateProcessing, tiers.StateSettled)
	e.clk.Advance(time.Second)
	dup := e.params(k)
	dup.Holder, dup.Actor, dup.PayloadHash = "pod-c", actor("carol", "http-rest"), sha("other")
	e.mustOutcome(dup, tiers.OutcomeDuplicate, tiers.ReasonUnspecified) // the record has no payload hash to differ from

	got := e.audit(k, 100)
	want := []tiers.AuditEntry{
		{At: t0, Op: tiers.AuditClaim, Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, State: tiers.StateReceived, Token: 1, Holder: "pod-a"},
		{At: t0.Add(time.Second), Op: tiers.AuditClaim, Outcome: tiers.OutcomeInProgress, State: tiers.StateReceived, Token: 1,
			Holder: "pod-b", Actor: actor("bob", "grpc")},
		{At: t0.Add(time.Second), Op: tiers.AuditTransition, State: tiers.StateProcessing, Token: 1, Holder: "pod-a"},
		{At: t0.Add(time.Second), Op: tiers.AuditTransition, State: tiers.StateSettled, Token: 1, Holder: "pod-a"},
		{At: t0.Add(2 * time.Second), Op: tiers.AuditClaim, Outcome: tiers.OutcomeDuplicate, State: tiers.StateSettled, Token: 1,
			Holder: "pod-c", Actor: actor("carol", "http-rest"), PayloadHash: sha("other")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListAudit(%q) (-want +got):\n%s", k, diff)
	}

	// A payload mismatch, and an event deferred before its entity's
	// prerequisite (no record is written: state and token are 0).
	const m = "evt_mismatch"
	pm := e.params(m)
	pm.PayloadHash = sha("one")
	e.mustOutcome(pm, tiers.OutcomeAcquired, tiers.ReasonNew)
	pm.PayloadHash, pm.Holder = sha("two"), "pod-x"
	e.mustOutcome(pm, tiers.OutcomePayloadMismatch, tiers.ReasonUnspecified)
	if got := e.audit(m, 100); len(got) != 2 || got[1].Outcome != tiers.OutcomePayloadMismatch || got[1].Holder != "pod-x" ||
		string(got[1].PayloadHash) != string(sha("two")) {
		t.Errorf("ListAudit(%q) = %+v, want the mismatch with pod-x's payload hash last", m, got)
	}
	e.ordered(e.event("evt_deferred", "pi_d", evSucceeded), tiers.OutcomeDeferred, piInitial, "", 1)
	wantDeferred := []tiers.AuditEntry{{At: e.clk.Now(), Op: tiers.AuditClaim, Outcome: tiers.OutcomeDeferred, Holder: "pod-a"}}
	if diff := cmp.Diff(wantDeferred, e.audit("evt_deferred", 10)); diff != "" {
		t.Errorf("ListAudit(deferred) (-want +got):\n%s", diff)
	}

	// 25 duplicates in one instant: pages of 4 list each once, in the
	// order they were written.
	for i := range 25 {
		p := e.params(k)
		p.Holder = "dup-" + string(rune('a'+i))
		e.mustOutcome(p, tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	}
	paged := e.audit(k, 4)
	if len(paged) != len(want)+25 {
		t.Fatalf("ListAudit(%q, pages of 4) = %d entries, want %d", k, len(paged), len(want)+25)
	}
	for i := range 25 {
		if h := paged[len(want)+i].Holder; h != "dup-"+string(rune('a'+i)) {
			t.Fatalf("ListAudit(%q) entry %d holder = %q, want dup-%c", k, len(want)+i, h, 'a'+i)
		}
	}

	// A cursor of this key's log is no cursor of another key's.
	_, next, err := e.inspector().ListAudit(e.ctx(), e.key(k), tiers.Page{Size: 1})
	if err != nil || next == "" {
		t.Fatalf("ListAudit(page of 1) next %q, %v; want a next page", next, err)
	}
	_, _, err = e.inspector().ListAudit(e.ctx(), e.key(m), tiers.Page{Size: 1, After: next})
	wantErr(t, "ListAudit(another key's cursor)", err, tiers.ErrInvalidCursor)
	_, _, err = e.inspector().ListClaims(e.ctx(), tiers.ClaimFilter{Namespace: e.ns}, tiers.Page{Size: 1, After: next})
	wantErr(t, "ListClaims(a ListAudit cursor)", err, tiers.ErrInvalidCursor)
}

// testListAuditOrdered: a retry of a key that has a record, turned away by
// its entity (SUPERSEDED: the entity moved past it), writes an audit row
// that names the record unchanged, its state and token; a DEFERRED claim of
// a key without a record names none (testListAuditClaims).
func testListAuditOrdered(t *testing.T, _ tiers.Durable, e *env) {
	e.atMicro()
	const id = "pi_audit"
	a := e.acquire(e.event("evt_a", id, evProcessing), piInitial)
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateProcessing)
	e.clk.Advance(lease) // evt_a's holder vanished: its hold ends with its lease
	e.apply("evt_b", id, evCanceled, piInitial)
	e.ordered(e.event("evt_a", id, evProcessing), tiers.OutcomeSuperseded, "canceled", "", 0)
	log := e.audit("evt_a", 10)
	want := tiers.AuditEntry{At: e.clk.Now(), Op: tiers.AuditClaim, Outcome: tiers.OutcomeSuperseded, State: tiers.StateProcessing, Token: 1, Holder: "pod-a"}
	if len(log) != 3 {
		t.Fatalf("ListAudit(evt_a) = %+v, want its claim, its transition and the superseded retry", log)
	}
	if diff := cmp.Diff(want, log[2]); diff != "" {
		t.Errorf("ListAudit(evt_a) last entry (-want +got):\n%s", diff)
	}
}
