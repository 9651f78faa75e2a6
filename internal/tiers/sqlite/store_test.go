package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

const (
	ttl   = 84 * time.Hour
	lease = 60 * time.Second
)

// t0 is the fake "now" of every test: a whole millisecond, as the service
// clock's fake gives.
var t0 = time.Date(2026, 11, 2, 10, 30, 0, 123_000_000, time.UTC)

func key(k string) tiers.Key { return tiers.Key{Namespace: "billing", Provider: "stripe", Key: k} }

// ownerSalt and ownerHash are the ownership fields of every claim in these
// tests (the conformance suite gives each claim its own): a wrong token is
// then stale, and a wrong hash is a test of its own.
var (
	ownerSalt = bytes.Repeat([]byte{0x5a}, tiers.SaltBytes)
	ownerHash = bytes.Repeat([]byte{0xa5}, tiers.SecretHashBytes)
)

func claimAt(k string, now time.Time) tiers.ClaimParams {
	return tiers.ClaimParams{Key: key(k), Now: now, Lease: lease, TTL: ttl, Holder: "pod-a", Salt: ownerSalt, SecretHash: ownerHash}
}

func newStore(t testing.TB, path string) *Store {
	t.Helper()
	s, err := New(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatalf("New(%q) error = %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tempPath(t testing.TB) string { return filepath.Join(t.TempDir(), "claimd.db") }

func mustClaim(t testing.TB, s *Store, p tiers.ClaimParams) tiers.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim(%q) error = %v", p.Key.Key, err)
	}
	return res
}

func mustTransition(t testing.TB, s *Store, k string, token uint64, now time.Time, to tiers.State, result []byte) tiers.Record {
	t.Helper()
	rec, _, err := s.Transition(context.Background(), tiers.TransitionParams{Key: key(k), Now: now, Token: token, SecretHash: ownerHash, To: to, Result: result})
	if err != nil {
		t.Fatalf("Transition(%q, →%v) error = %v", k, to, err)
	}
	return rec
}

func TestNewMigrates(t *testing.T) {
	path := tempPath(t)
	s := newStore(t, path)
	var versions []int
	rows, err := s.r.Query(`SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	rows.Close()
	if len(versions) != SchemaVersion() || versions[len(versions)-1] != SchemaVersion() {
		t.Fatalf("schema_migrations = %v, want 1..%d", versions, SchemaVersion())
	}
	var mode string
	if err := s.r.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	// Migrating again changes nothing.
	if err := Migrate(context.Background(), s.w); err != nil {
		t.Fatalf("Migrate(again) error = %v", err)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	path := tempPath(t)
	s := newStore(t, path)
	if _, err := s.w.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := New(context.Background(), Config{Path: path}); err == nil {
		t.Fatal("New(database of a newer binary) error = nil, want a refusal")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		desc string
		cfg  Config
	}{
		{"no path", Config{}},
		{"negative busy timeout", Config{Path: "x.db", BusyTimeout: -time.Second}},
		{"missing directory", Config{Path: filepath.Join(t.TempDir(), "no", "such", "dir", "x.db")}},
		{"negative batch", Config{Path: tempPath(t), MaxBatch: -1}},
		{"unknown durability", Config{Path: tempPath(t), Durability: Durability(7)}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if s, err := New(context.Background(), tc.cfg); err == nil {
				s.Close()
				t.Fatalf("New(%+v) error = nil, want an error", tc.cfg)
			}
		})
	}
}

// A restart of claimd: the file is closed and opened again, and every record
// reads back exactly as it was returned.
func TestRestartPersistence(t *testing.T) {
	path := tempPath(t)
	s := newStore(t, path)
	p := claimAt("evt_1", t0)
	p.PayloadHash = make([]byte, 32)
	p.AttemptID = "att-1"
	a := mustClaim(t, s, p)
	mustTransition(t, s, "evt_1", a.Record.Token, t0.Add(time.Second), tiers.StateProcessing, nil)
	settled := mustTransition(t, s, "evt_1", a.Record.Token, t0.Add(2*time.Second), tiers.StateSettled, []byte{0, 1, 255})
	open := mustClaim(t, s, claimAt("evt_2", t0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}

	s = newStore(t, path)
	for _, want := range []tiers.Record{settled, open.Record} {
		got, err := s.Get(context.Background(), want.Key)
		if err != nil {
			t.Fatalf("Get(%q) after restart error = %v", want.Key.Key, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get(%q) after restart (-before +after):\n%s", want.Key.Key, diff)
		}
	}
	res := mustClaim(t, s, claimAt("evt_1", t0.Add(time.Minute)))
	if res.Outcome != tiers.OutcomeDuplicate || string(res.Record.Result) != "\x00\x01\xff" {
		t.Errorf("Claim(%q) after restart = %v result %q, want DUPLICATE with the stored result", "evt_1", res.Outcome, res.Record.Result)
	}
}

// TestConcurrentClaimsAcquireOnce races claims of a new key with the
// suite's harness and checks that the durable tier itself answered each and
// audited each.
func TestConcurrentClaimsAcquireOnce(t *testing.T) {
	const n = 64
	s := newStore(t, tempPath(t))
	results := tierstest.ClaimRace(t, s, n, func(int) tiers.ClaimParams { return claimAt("evt_race", t0) })
	for i, res := range results {
		if res.ServedBy != tiers.TierDurable {
			t.Errorf("Claim #%d served by %v, want DURABLE", i, res.ServedBy)
		}
	}
	var rows int
	if err := s.r.QueryRow(`SELECT count(*) FROM audit_log WHERE key = 'evt_race' AND op = 'claim'`).Scan(&rows); err != nil || rows != n {
		t.Fatalf("audit rows of the race = %d, %v; want %d", rows, err, n)
	}
}

// auditEntry is an audit_log row without its id and key.
type auditEntry struct {
	At                  time.Time
	Op, Outcome, Reason string
	FromState, ToState  string
	Token               int64
	Holder              string
}

func readAudit(t *testing.T, s *Store, k string) []auditEntry {
	t.Helper()
	rows, err := s.r.Query(`SELECT at, op, outcome, reason, from_state, to_state, token, holder
		FROM audit_log WHERE key = ? ORDER BY id`, k)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditEntry
	for rows.Next() {
		var (
			a  auditEntry
			at int64
		)
		if err := rows.Scan(&at, &a.Op, &a.Outcome, &a.Reason, &a.FromState, &a.ToState, &a.Token, &a.Holder); err != nil {
			t.Fatal(err)
		}
		a.At = fromMicros(at)
		out = append(out, a)
	}
	return out
}

func TestAuditRows(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	k := key("evt_audit")

	mustClaim(t, s, claimAt("evt_audit", at(0)))
	other := claimAt("evt_audit", at(time.Second))
	other.Holder = "pod-b"
	mustClaim(t, s, other)
	mustTransition(t, s, "evt_audit", 1, at(2*time.Second), tiers.StateProcessing, nil)
	mustTransition(t, s, "evt_audit", 1, at(3*time.Second), tiers.StateProcessing, nil) // a repeat
	s.Transition(ctx, tiers.TransitionParams{Key: k, Now: at(4 * time.Second), Token: 1, SecretHash: ownerHash, To: tiers.StateValidated})
	s.Transition(ctx, tiers.TransitionParams{Key: k, Now: at(5 * time.Second), Token: 2, SecretHash: ownerHash, To: tiers.StateSettled})
	s.Renew(ctx, tiers.RenewParams{Key: k, Now: at(6 * time.Second), Token: 1, SecretHash: ownerHash, Lease: lease})
	s.Release(ctx, tiers.ReleaseParams{Key: k, Now: at(6500 * time.Millisecond), Token: 1, SecretHash: make([]byte, tiers.SecretHashBytes)})
	s.Release(ctx, tiers.ReleaseParams{Key: k, Now: at(7 * time.Second), Token: 1, SecretHash: ownerHash})
	s.Release(ctx, tiers.ReleaseParams{Key: k, Now: at(8 * time.Second), Token: 1, SecretHash: ownerHash})
	mustClaim(t, s, claimAt("evt_audit", at(9*time.Second)))
	s.Transition(ctx, tiers.TransitionParams{Key: key("evt_none"), Now: at(10 * time.Second), Token: 1, SecretHash: ownerHash, To: tiers.StateFailed})

	// Every claim outcome and every change has its row; calls that were
	// refused (stale token, not the owner, invalid transition, unknown key) or repeated
	// and changed nothing have none, as in the PostgreSQL tier: a flood of
	// them must not grow a log that is kept for months.
	want := []auditEntry{
		{at(0), "claim", "ACQUIRED", "NEW", "", "RECEIVED", 1, "pod-a"},
		{at(time.Second), "claim", "IN_PROGRESS", "", "RECEIVED", "RECEIVED", 1, "pod-b"},
		{at(2 * time.Second), "transition", "CHANGED", "", "RECEIVED", "PROCESSING", 1, "pod-a"},
		{at(6 * time.Second), "renew", "CHANGED", "", "PROCESSING", "PROCESSING", 1, "pod-a"},
		{at(7 * time.Second), "release", "CHANGED", "", "PROCESSING", "PROCESSING", 1, "pod-a"},
		{at(9 * time.Second), "claim", "ACQUIRED", "RELEASED", "PROCESSING", "RECEIVED", 2, "pod-a"},
	}
	if diff := cmp.Diff(want, readAudit(t, s, "evt_audit")); diff != "" {
		t.Errorf("audit_log of evt_audit (-want +got):\n%s", diff)
	}
	if got := readAudit(t, s, "evt_none"); len(got) != 0 {
		t.Errorf("audit_log of evt_none = %+v, want no rows: a call on a missing key writes nothing", got)
	}
}

// TestMissesWriteNoAuditRows is the regression test of 1,000 Transitions on
// keys that do not exist adding 1,000 audit rows: refused and missing-key
// calls write nothing at all.
func TestMissesWriteNoAuditRows(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	mustClaim(t, s, claimAt("evt_held", t0))
	mustTransition(t, s, "evt_held", 1, t0, tiers.StateProcessing, nil)
	mustTransition(t, s, "evt_held", 1, t0, tiers.StateSettled, []byte("ok"))
	var before int
	if err := s.r.QueryRow(`SELECT count(*) FROM audit_log`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		k := key(fmt.Sprintf("evt_missing_%d", i))
		s.Transition(ctx, tiers.TransitionParams{Key: k, Now: t0, Token: 1, To: tiers.StateProcessing})
		s.Renew(ctx, tiers.RenewParams{Key: k, Now: t0, Token: 1, Lease: lease})
		s.Release(ctx, tiers.ReleaseParams{Key: k, Now: t0, Token: 1})
	}
	held := key("evt_held")
	s.Transition(ctx, tiers.TransitionParams{Key: held, Now: t0, Token: 2, To: tiers.StateSettled})                      // stale token
	s.Transition(ctx, tiers.TransitionParams{Key: held, Now: t0, Token: 1, To: tiers.StateProcessing})                   // invalid transition
	s.Transition(ctx, tiers.TransitionParams{Key: held, Now: t0, Token: 1, To: tiers.StateSettled, Result: []byte("x")}) // result mismatch
	s.Renew(ctx, tiers.RenewParams{Key: held, Now: t0, Token: 1, Lease: lease})                                          // terminal
	s.Release(ctx, tiers.ReleaseParams{Key: held, Now: t0, Token: 1})                                                    // terminal
	var after int
	if err := s.r.QueryRow(`SELECT count(*) FROM audit_log`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("audit rows after 300 missing-key and 5 refused calls = %d, want %d (unchanged)", after, before)
	}
}

func TestOperationErrors(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	// evt_open: token 2 holds it (after a lease takeover); evt_done: settled;
	// evt_rel: released by token 1.
	mustClaim(t, s, claimAt("evt_open", t0))
	if res := mustClaim(t, s, claimAt("evt_open", t0.Add(lease))); res.Record.Token != 2 {
		t.Fatalf("takeover token = %d, want 2", res.Record.Token)
	}
	mustClaim(t, s, claimAt("evt_done", t0))
	mustTransition(t, s, "evt_done", 1, t0, tiers.StateFailed, nil)
	mustClaim(t, s, claimAt("evt_rel", t0))
	if _, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_rel"), Now: t0, Token: 1, SecretHash: ownerHash}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(2 * lease)

	tests := []struct {
		desc      string
		call      func() error
		want      error       // errors.Is target, or nil
		wantState tiers.State // *TransitionError's Current, when want is nil
	}{
		{"transition with the taken-over token", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_open"), Now: now, Token: 1, SecretHash: ownerHash, To: tiers.StateProcessing})
			return err
		}, tiers.ErrStaleToken, 0},
		{"transition with a token never issued", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_open"), Now: now, Token: 3, SecretHash: ownerHash, To: tiers.StateProcessing})
			return err
		}, tiers.ErrStaleToken, 0},
		{"transition of a released token", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_rel"), Now: now, Token: 1, SecretHash: ownerHash, To: tiers.StateProcessing})
			return err
		}, tiers.ErrStaleToken, 0},
		{"transition with the current token and another secret", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_open"), Now: now, Token: 2, SecretHash: make([]byte, tiers.SecretHashBytes), To: tiers.StateProcessing})
			return err
		}, tiers.ErrNotOwner, 0},
		{"transition not allowed", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_open"), Now: now, Token: 2, SecretHash: ownerHash, To: tiers.StateSettled})
			return err
		}, nil, tiers.StateReceived},
		{"transition of an unknown key", func() error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_none"), Now: now, Token: 1, SecretHash: ownerHash, To: tiers.StateProcessing})
			return err
		}, tiers.ErrNotFound, 0},
		{"renew with a stale token", func() error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_open"), Now: now, Token: 1, SecretHash: ownerHash, Lease: lease})
			return err
		}, tiers.ErrStaleToken, 0},
		{"renew of a released token", func() error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_rel"), Now: now, Token: 1, SecretHash: ownerHash, Lease: lease})
			return err
		}, tiers.ErrStaleToken, 0},
		{"renew of a terminal record", func() error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_done"), Now: now, Token: 1, SecretHash: ownerHash, Lease: lease})
			return err
		}, nil, tiers.StateFailed},
		{"renew of an unknown key", func() error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_none"), Now: now, Token: 1, SecretHash: ownerHash, Lease: lease})
			return err
		}, tiers.ErrNotFound, 0},
		{"release with a stale token", func() error {
			_, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_open"), Now: now, Token: 1, SecretHash: ownerHash})
			return err
		}, tiers.ErrStaleToken, 0},
		{"release of a terminal record", func() error {
			_, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_done"), Now: now, Token: 1, SecretHash: ownerHash})
			return err
		}, nil, tiers.StateFailed},
		{"release of an unknown key", func() error {
			_, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_none"), Now: now, Token: 1, SecretHash: ownerHash})
			return err
		}, tiers.ErrNotFound, 0},
		{"get of an unknown key", func() error {
			_, err := s.Get(ctx, key("evt_none"))
			return err
		}, tiers.ErrNotFound, 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := tc.call()
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("error = %v, want %v", err, tc.want)
				}
				return
			}
			var te *tiers.TransitionError
			if !errors.As(err, &te) || te.Current != tc.wantState {
				t.Fatalf("error = %v, want *tiers.TransitionError in state %v", err, tc.wantState)
			}
		})
	}
	// None of the refusals changed a record.
	for k, want := range map[string]tiers.State{"evt_open": tiers.StateReceived, "evt_done": tiers.StateFailed, "evt_rel": tiers.StateReceived} {
		rec, err := s.Get(ctx, key(k))
		if err != nil || rec.State != want {
			t.Errorf("Get(%q) = %v, %v; want %v", k, rec.State, err, want)
		}
	}
}

func TestContextErrorsPassThrough(t *testing.T) {
	s := newStore(t, tempPath(t))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Claim": func() error { _, err := s.Claim(cancelled, claimAt("evt_1", t0)); return err },
		"Transition": func() error {
			_, _, err := s.Transition(cancelled, tiers.TransitionParams{Key: key("evt_1"), Now: t0, Token: 1, SecretHash: ownerHash, To: tiers.StateFailed})
			return err
		},
		"Get":   func() error { _, err := s.Get(cancelled, key("evt_1")); return err },
		"Prune": func() error { _, err := s.Prune(cancelled, t0, 10); return err },
	}
	for name, call := range calls {
		if err := call(); err != context.Canceled {
			t.Errorf("%s(cancelled ctx) error = %v, want context.Canceled unwrapped", name, err)
		}
	}
	if _, err := s.Get(context.Background(), key("evt_1")); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get after a cancelled Claim error = %v, want ErrNotFound: nothing was written", err)
	}
}

// Another process holding the write lock past the busy timeout makes the
// tier unavailable (the service fails closed), not broken.
func TestBusyIsUnavailable(t *testing.T) {
	path := tempPath(t)
	s, err := New(context.Background(), Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", dsn(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(context.Background(), claimAt("evt_busy", t0))
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Claim(file locked by another process) error = %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if res := mustClaim(t, s, claimAt("evt_busy", t0)); res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(after the lock is gone) = %v, want ACQUIRED (the failed claim left nothing)", res.Outcome)
	}
}

func TestClosedIsUnavailable(t *testing.T) {
	s := newStore(t, tempPath(t))
	s.Close()
	if _, err := s.Claim(context.Background(), claimAt("evt_1", t0)); !errors.Is(err, tiers.ErrUnavailable) {
		t.Errorf("Claim(closed) error = %v, want ErrUnavailable", err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, tiers.ErrUnavailable) {
		t.Errorf("Ping(closed) error = %v, want ErrUnavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() error = %v, want nil", err)
	}
}

func TestPrune(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	// Windows end at t0+ttl+{0,1,2,3}s.
	for i := range 4 {
		mustClaim(t, s, claimAt(fmt.Sprintf("evt_%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	end := t0.Add(ttl)
	tests := []struct {
		desc     string
		cutoff   time.Time
		limit    int
		wantN    int
		wantLeft int64
	}{
		{"cutoff at a window's end keeps it", end, 10, 0, 4},
		{"one microsecond later prunes it", end.Add(time.Microsecond), 10, 1, 3},
		{"the batch is bounded", end.Add(time.Hour), 1, 1, 2},
		{"a younger record stays", end.Add(3 * time.Second), 10, 1, 1},
		{"the rest", end.Add(time.Hour), 10, 1, 0},
	}
	for _, tc := range tests {
		n, err := s.Prune(ctx, tc.cutoff, tc.limit)
		if err != nil || n != tc.wantN {
			t.Fatalf("%s: Prune(%v, %d) = %d, %v; want %d", tc.desc, tc.cutoff, tc.limit, n, err, tc.wantN)
		}
		if left, err := s.Stats(ctx); err != nil || left != tc.wantLeft {
			t.Fatalf("%s: Stats() = %d, %v; want %d", tc.desc, left, err, tc.wantLeft)
		}
	}
	if _, err := s.Get(ctx, key("evt_0")); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get(pruned) error = %v, want ErrNotFound", err)
	}
	if _, err := s.Prune(ctx, end, 0); err == nil {
		t.Errorf("Prune(limit 0) error = nil, want an error")
	}
}

func TestPruneAudit(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	for i := range 5 {
		mustClaim(t, s, claimAt("evt_a", t0.Add(time.Duration(i)*time.Hour)))
	}
	n, err := s.PruneAudit(ctx, t0.Add(3*time.Hour), 2)
	if err != nil || n != 2 {
		t.Fatalf("PruneAudit(limit 2) = %d, %v; want 2", n, err)
	}
	n, err = s.PruneAudit(ctx, t0.Add(3*time.Hour), 100)
	if err != nil || n != 1 {
		t.Fatalf("PruneAudit(rest) = %d, %v; want 1", n, err)
	}
	if got := readAudit(t, s, "evt_a"); len(got) != 2 || !got[0].At.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("audit after PruneAudit = %+v, want the rows from t0+3h on", got)
	}
}

// Times are stored in microseconds; a claim returns exactly what Get reads
// back later, even when Now carries nanoseconds.
func TestMicrosecondPrecision(t *testing.T) {
	s := newStore(t, tempPath(t))
	now := t0.Add(1234567 * time.Nanosecond).In(time.FixedZone("x", 3600))
	res := mustClaim(t, s, claimAt("evt_us", now))
	got, err := s.Get(context.Background(), key("evt_us"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.Record, got); diff != "" {
		t.Errorf("Get after Claim (-claim +get):\n%s", diff)
	}
	if want := now.Truncate(time.Microsecond); !got.FirstSeenAt.Equal(want) {
		t.Errorf("FirstSeenAt = %v, want %v", got.FirstSeenAt, want)
	}
}

func BenchmarkClaimNew(b *testing.B) {
	s := newStore(b, tempPath(b))
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Claim(ctx, claimAt("evt_"+fmt.Sprint(i), t0)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimDuplicate(b *testing.B) {
	s := newStore(b, tempPath(b))
	ctx := context.Background()
	res := mustClaim(b, s, claimAt("evt_dup", t0))
	mustTransition(b, s, "evt_dup", res.Record.Token, t0, tiers.StateProcessing, nil)
	mustTransition(b, s, "evt_dup", res.Record.Token, t0, tiers.StateSettled, []byte(`{"charge":"ch_1"}`))
	p := claimAt("evt_dup", t0.Add(time.Second))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Claim(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimNewConcurrent claims new keys from 50 goroutines, as the
// service's callers do, with each Durability: group commit is what keeps
// FULL's fsync per transaction from costing one per claim.
func BenchmarkClaimNewConcurrent(b *testing.B) {
	for _, d := range []Durability{DurabilityFull, DurabilityRelaxed} {
		b.Run(d.String(), func(b *testing.B) {
			s, err := New(context.Background(), Config{Path: tempPath(b), Durability: d})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			var n atomic.Int64
			b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Claim(context.Background(), claimAt(fmt.Sprint("evt_", n.Add(1)), t0)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(s.commit.committed.Load())/float64(max(1, s.commit.batches.Load())), "writes/txn")
		})
	}
}

// TestRowsFromBeforeLeaseSecrets covers a record claimed by a binary that
// stored no salt or secret hash (schema version 1): nobody can prove
// ownership of it, so every fenced write is refused as not the owner, and
// the next takeover gives it an owner that can.
func TestRowsFromBeforeLeaseSecrets(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	mustClaim(t, s, claimAt("evt_old", t0))
	if _, err := s.w.Exec(`UPDATE claims SET salt = NULL, secret_hash = NULL`); err != nil {
		t.Fatal(err)
	}
	for _, hash := range [][]byte{nil, ownerHash} {
		_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_old"), Now: t0, Token: 1, SecretHash: hash, To: tiers.StateProcessing})
		if !errors.Is(err, tiers.ErrNotOwner) {
			t.Fatalf("Transition(row without a secret hash, hash %x) error = %v, want ErrNotOwner", hash, err)
		}
	}
	res := mustClaim(t, s, claimAt("evt_old", t0.Add(lease)))
	if res.Outcome != tiers.OutcomeAcquired || res.Reason != tiers.ReasonLeaseExpired || !bytes.Equal(res.Record.SecretHash, ownerHash) {
		t.Fatalf("Claim(after the lease) = %v/%v hash %x, want ACQUIRED/LEASE_EXPIRED with the claimant's hash", res.Outcome, res.Reason, res.Record.SecretHash)
	}
	mustTransition(t, s, "evt_old", res.Record.Token, t0.Add(lease), tiers.StateProcessing, nil)
}
