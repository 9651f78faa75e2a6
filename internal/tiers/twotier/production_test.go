package twotier_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestRedisPostgresPair runs the conformance suite, unchanged, against the
// production pairing on real servers: the subtests share one database and
// one Redis, as replicas of claimd do, each in the suite's per-subtest
// namespace.
func TestRedisPostgresPair(t *testing.T) {
	pgURL := testenv.Postgres(t, postgres.Migrate)
	redisURL := testenv.Redis(t)
	tierstest.Run(t, func(t *testing.T) tierstest.Opener {
		return func(t *testing.T) tiers.Store {
			return openPair(t, redisURL, pgURL, twotier.Config{})
		}
	})
}

func openPair(t *testing.T, redisURL, pgURL string, cfg twotier.Config) *twotier.Store {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.New(ctx, postgres.Config{URL: pgURL})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redis.New(ctx, redis.Config{URL: redisURL})
	if err != nil {
		pg.Close()
		t.Fatal(err)
	}
	return twotier.New(rd, pg, cfg)
}

// counter is an Observer that counts what the composition reports.
type counter struct {
	falseNegatives atomic.Int64
	integrity      atomic.Int64 // FastIntegrityFailure
	fastErrors     atomic.Int64
	lastFastError  atomic.Value // error
}

func (c *counter) FastFalseNegative()     { c.falseNegatives.Add(1) }
func (c *counter) FastRepairsPending(int) {}
func (c *counter) FastRepairDropped()     {}
func (c *counter) FastIntegrityFailure()  { c.integrity.Add(1) }
func (c *counter) TierError(tier tiers.Tier, op string, err error) {
	if tier == tiers.TierFast {
		c.fastErrors.Add(1)
		c.lastFastError.Store(fmt.Errorf("%s: %w", op, err))
	}
}

type fixture struct {
	t     *testing.T
	store *twotier.Store
	clk   *clock.Fake
	obs   *counter
	rdb   goredis.UniversalClient
	redis fastServer
	pg    *testenv.Server
}

// fastServer is a Redis deployment a test can stop and start: one
// *testenv.Server or a whole *testenv.Cluster.
type fastServer interface {
	URL() string
	Stop(testing.TB)
	Start(testing.TB)
}

// deployments are the Redis deployments the composition tests run on.
var deployments = []struct {
	desc  string
	start func(t *testing.T) fastServer
}{
	{"standalone", func(t *testing.T) fastServer { return testenv.StartRedis(t) }},
	{"cluster", func(t *testing.T) fastServer { return testenv.StartRedisCluster(t) }},
}

// eachDeployment runs test once per Redis deployment, each on private
// servers.
func eachDeployment(t *testing.T, test func(f *fixture)) {
	for _, d := range deployments {
		t.Run(d.desc, func(t *testing.T) { test(newFixture(t, d.start(t))) })
	}
}

// newFixture starts a private PostgreSQL (the test stops and restarts it and
// redis) and composes it with redis without the local cache, so every answer
// comes from the tier under test. The repairs that failed while a tier was
// down are retried on the fixture's clock, so only a test that advances it
// sees them land: on the wall clock a retry could land before the claim
// that was to repair the record (TestFastTierOutageDegrades failed that way
// once in CI, its settled record answered FAST instead of DURABLE).
func newFixture(t *testing.T, redis fastServer) *fixture {
	f := &fixture{t: t, clk: clock.NewFake(time.Now()), obs: &counter{}, redis: redis}
	f.pg = testenv.StartPostgres(t, postgres.Migrate)
	f.store = openPair(t, f.redis.URL(), f.pg.URL(), twotier.Config{LocalEntries: -1, Observer: f.obs, Clock: f.clk})
	t.Cleanup(func() { f.store.Close() })
	f.rdb = rawClient(t, f.redis)
	return f
}

// rawClient is a plain client of the deployment, for looking at and
// flushing what the tier left there.
func rawClient(t *testing.T, s fastServer) goredis.UniversalClient {
	t.Helper()
	var c goredis.UniversalClient
	if _, ok := s.(*testenv.Cluster); ok {
		opts, err := goredis.ParseClusterURL(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		c = goredis.NewClusterClient(opts)
	} else {
		opts, err := goredis.ParseURL(s.URL())
		if err != nil {
			t.Fatal(err)
		}
		c = goredis.NewClient(opts)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// flushAll empties every primary: FLUSHALL on a cluster client goes to one
// node only.
func (f *fixture) flushAll() {
	f.t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := f.rdb.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return m.FlushAll(ctx).Err() })
	} else {
		err = f.rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) params(k string) tiers.ClaimParams {
	return tiers.ClaimParams{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: k},
		Now: f.clk.Now(), Lease: time.Minute, TTL: 84 * time.Hour, Holder: "pod-a",
		Salt: bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: ownerHash,
	}
}

// ownerHash is the secret hash of every claim of these tests.
var ownerHash = bytes.Repeat([]byte{2}, tiers.SecretHashBytes)

func (f *fixture) claim(k string, want tiers.Outcome, wantBy tiers.Tier) tiers.ClaimResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := f.store.Claim(ctx, f.params(k))
	if err != nil {
		f.t.Fatalf("Claim(%q) error = %v", k, err)
	}
	if res.Outcome != want || res.ServedBy != wantBy {
		f.t.Fatalf("Claim(%q) = %v served by %v, want %v served by %v", k, res.Outcome, res.ServedBy, want, wantBy)
	}
	return res
}

func (f *fixture) settle(k string, token uint64, result string) {
	f.t.Helper()
	f.transition(k, token, tiers.StateProcessing, "")
	f.transition(k, token, tiers.StateSettled, result)
}

// transition moves k to state to, storing result ("" for none).
func (f *fixture) transition(k string, token uint64, to tiers.State, result string) {
	f.t.Helper()
	p := tiers.TransitionParams{Key: f.params(k).Key, Now: f.clk.Now(), Token: token, SecretHash: ownerHash, To: to}
	if result != "" {
		p.Result = []byte(result)
	}
	if _, _, err := f.store.Transition(context.Background(), p); err != nil {
		f.t.Fatalf("Transition(%q, →%v) error = %v", k, to, err)
	}
}

func (f *fixture) redisKeyExists(k string) bool {
	f.t.Helper()
	n, err := f.rdb.Exists(context.Background(), "idem:{billing:stripe:"+k+"}").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return n == 1
}

// (a) A flush of the fast tier between a settled claim and its duplicate:
// the durable tier answers, and repairs the fast tier.
func TestFastTierFlushIsCaughtByDurable(t *testing.T) {
	eachDeployment(t, testFastTierFlushIsCaughtByDurable)
}

func testFastTierFlushIsCaughtByDurable(f *fixture) {
	t := f.t
	res := f.claim("evt_flush", tiers.OutcomeAcquired, tiers.TierDurable)
	f.settle("evt_flush", res.Record.Token, "receipt-1")
	f.claim("evt_flush", tiers.OutcomeDuplicate, tiers.TierFast)

	f.flushAll()
	dup := f.claim("evt_flush", tiers.OutcomeDuplicate, tiers.TierDurable)
	if string(dup.Record.Result) != "receipt-1" {
		t.Fatalf("Claim(after FLUSHALL) result = %q, want receipt-1", dup.Record.Result)
	}
	if n := f.obs.falseNegatives.Load(); n != 1 {
		t.Fatalf("fast-tier false negatives = %d, want 1", n)
	}
	again := f.claim("evt_flush", tiers.OutcomeDuplicate, tiers.TierFast)
	if string(again.Record.Result) != "receipt-1" {
		t.Fatalf("Claim(after repair) result = %q, want receipt-1", again.Record.Result)
	}
}

// (b) PostgreSQL down: a new claim fails closed within its deadline and
// leaves no fast-tier key; once PostgreSQL is back the same claim is NEW.
func TestDurableOutageFailsClosed(t *testing.T) {
	eachDeployment(t, testDurableOutageFailsClosed)
}

func testDurableOutageFailsClosed(f *fixture) {
	t := f.t
	before := f.claim("evt_before", tiers.OutcomeAcquired, tiers.TierDurable)
	f.transition("evt_before", before.Record.Token, tiers.StateProcessing, "")
	done := f.claim("evt_done", tiers.OutcomeAcquired, tiers.TierDurable)
	f.settle("evt_done", done.Record.Token, "receipt")
	f.claim("evt_marker", tiers.OutcomeAcquired, tiers.TierDurable)
	f.pg.Stop(t)

	const deadline = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	started := time.Now()
	_, err := f.store.Claim(ctx, f.params("evt_outage"))
	if elapsed := time.Since(started); elapsed > deadline+500*time.Millisecond {
		t.Fatalf("Claim(durable down) took %v, want within its %v deadline", elapsed, deadline)
	}
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Claim(durable down) error = %v, want ErrUnavailable", err)
	}
	if f.redisKeyExists("evt_outage") {
		t.Fatal("Claim(durable down) left a fast-tier key: the retry would be answered IN_PROGRESS by a claim that never happened")
	}
	// The fast tier still answers from the settled records it holds, which
	// never change within their window. A copy of a record in progress may
	// be older than the row (a write that committed and failed refreshed no
	// copy), and a first claim's marker answers nothing itself: both keys
	// fail closed with the durable tier.
	f.claim("evt_done", tiers.OutcomeDuplicate, tiers.TierFast)
	for _, k := range []string{"evt_before", "evt_marker"} {
		if _, err := f.store.Claim(ctx, f.params(k)); !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("Claim(%q, durable down) error = %v, want ErrUnavailable", k, err)
		}
	}

	f.pg.Start(t)
	res := f.claim("evt_outage", tiers.OutcomeAcquired, tiers.TierDurable)
	if res.Reason != tiers.ReasonNew || res.Record.Token != 1 {
		t.Fatalf("Claim(after recovery) = %v/%v token %d, want ACQUIRED/NEW token 1", res.Outcome, res.Reason, res.Record.Token)
	}
}

// (c) Redis down: everything stays correct through PostgreSQL alone; when
// Redis returns, the fast tier is used again without a restart.
func TestFastTierOutageDegrades(t *testing.T) {
	eachDeployment(t, testFastTierOutageDegrades)
}

func testFastTierOutageDegrades(f *fixture) {
	t := f.t
	f.redis.Stop(t)

	a := f.claim("evt_deg", tiers.OutcomeAcquired, tiers.TierDurable)
	f.claim("evt_deg", tiers.OutcomeInProgress, tiers.TierDurable)
	f.settle("evt_deg", a.Record.Token, "receipt-2")
	dup := f.claim("evt_deg", tiers.OutcomeDuplicate, tiers.TierDurable)
	if string(dup.Record.Result) != "receipt-2" {
		t.Fatalf("Claim(duplicate, redis down) result = %q", dup.Record.Result)
	}
	if f.obs.fastErrors.Load() == 0 {
		t.Fatal("no fast-tier errors observed while Redis was down")
	}

	f.redis.Start(t)
	b := f.claim("evt_back", tiers.OutcomeAcquired, tiers.TierDurable)
	// The first duplicate meets b's marker and asks the durable tier, which
	// fills the record in; the next is answered by the fast tier.
	f.claim("evt_back", tiers.OutcomeInProgress, tiers.TierDurable)
	f.claim("evt_back", tiers.OutcomeInProgress, tiers.TierFast)
	f.settle("evt_back", b.Record.Token, "receipt-3")
	f.claim("evt_back", tiers.OutcomeDuplicate, tiers.TierFast)
	// The record settled while Redis was down is repaired on first use.
	f.claim("evt_deg", tiers.OutcomeDuplicate, tiers.TierDurable)
	f.claim("evt_deg", tiers.OutcomeDuplicate, tiers.TierFast)
}
