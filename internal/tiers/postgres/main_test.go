package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

func TestMain(m *testing.M) {
	testenv.PostgresTemplate(postgres.Migrate)
	os.Exit(testenv.Main(m))
}

const (
	ttl   = 84 * time.Hour
	lease = 60 * time.Second
)

// env is one test's world: a Store over a database of its own, a direct pool
// on the same database for catalog and audit queries, and a fake clock.
type env struct {
	t     testing.TB
	url   string
	store *postgres.Store
	db    *pgxpool.Pool
	clk   *clock.Fake
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := testenv.Postgres(t, postgres.Migrate)
	ctx := context.Background()
	s, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &env{t: t, url: url, store: s, db: openDB(t, url, postgres.DefaultSchema), clk: clock.NewFake(time.Now())}
}

// openDB opens a pool on url whose connections see schema, as the Store's
// do, for the queries a test runs itself.
func openDB(t testing.TB, url, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool.NewWithConfig() error = %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

// ctx bounds one call of a test.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func key(k string) tiers.Key { return tiers.Key{Namespace: "billing", Provider: "stripe", Key: k} }

// ownerSalt and ownerHash are the ownership fields of every claim in these
// tests (the conformance suite gives each claim its own): a wrong token is
// then stale, and a wrong hash is a case of its own.
var (
	ownerSalt = bytes.Repeat([]byte{0x5a}, tiers.SaltBytes)
	ownerHash = bytes.Repeat([]byte{0xa5}, tiers.SecretHashBytes)
)

func (e *env) params(k string) tiers.ClaimParams {
	return tiers.ClaimParams{Key: key(k), Now: e.clk.Now(), Lease: lease, TTL: ttl, Holder: "pod-a", Salt: ownerSalt, SecretHash: ownerHash}
}

func (e *env) claim(p tiers.ClaimParams) tiers.ClaimResult {
	e.t.Helper()
	res, err := e.store.Claim(e.ctx(), p)
	if err != nil {
		e.t.Fatalf("Claim(%q) error = %v", p.Key.Key, err)
	}
	return res
}

func (e *env) transition(k string, token uint64, to tiers.State) tiers.Record {
	e.t.Helper()
	var result []byte
	if to.Terminal() {
		result = []byte("result-of-" + k)
	}
	rec, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: key(k), Now: e.clk.Now(), Token: token, SecretHash: ownerHash, To: to, Result: result})
	if err != nil {
		e.t.Fatalf("Transition(%q, →%v) error = %v", k, to, err)
	}
	return rec
}

// get returns the record of k, or nil when there is none.
func (e *env) get(k string) *tiers.Record {
	e.t.Helper()
	rec, err := e.store.Get(e.ctx(), key(k))
	if err != nil {
		if errors.Is(err, tiers.ErrNotFound) {
			return nil
		}
		e.t.Fatalf("Get(%q) error = %v", k, err)
	}
	return &rec
}

// auditRow is one row of audit_log as the tests read it.
type auditRow struct {
	Op      string
	Outcome *int16
	Reason  *int16
	State   int16
	Token   int64
	Holder  string
}

// audit returns the audit rows of k in the order they were written.
func (e *env) audit(k string) []auditRow {
	e.t.Helper()
	rows, _ := e.db.Query(e.ctx(), `SELECT op, outcome, reason, state, token, holder
		FROM audit_log WHERE key = $1 ORDER BY id`, k)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditRow])
	if err != nil {
		e.t.Fatalf("reading audit_log: %v", err)
	}
	return got
}

var freshSeq atomic.Int64

// freshDatabase creates an empty database (no migrations) on the test
// server and returns its URL; it is dropped when the test ends.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := testenv.Postgres(t, postgres.Migrate)
	name := fmt.Sprintf("fresh_%d_%d", os.Getpid(), freshSeq.Add(1))
	ctx := context.Background()
	admin := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin("CREATE DATABASE " + name)
	t.Cleanup(func() { admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
