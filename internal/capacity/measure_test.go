package capacity

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
)

var update = flag.Bool("update", false, "write the measured sizes to sizes.json")

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Result sizes measured. Redis keeps a result of up to
// redis.MaxInlineResult bytes in the record and none past it (PostgreSQL
// has it), so the points either side of that step matter; PostgreSQL moves
// values past about 2 KiB to TOAST.
var (
	redisResultSizes    = []int{0, redis.MaxInlineResult, redis.MaxInlineResult + 1, 256, 1024, 4096}
	postgresResultSizes = []int{0, 256, 1024, 4096}
)

// Records per measurement step. Sizes are deltas between two steps of
// this many records, so a table's or a server's fixed overhead cancels out.
const perStep = 500

// tolerance is how far a new measurement may stray from sizes.json before
// the file is stale: allocator rounding moves a figure a little from run to
// run, a schema or codec change moves it more.
const tolerance = 0.2

// TestMeasure measures what a record costs on a real Redis and PostgreSQL,
// through claimd's own stores, and compares it with sizes.json (or, with
// -update, writes it there). It also checks that the CPU figures in
// sizes.json are those of bench/results.json.
func TestMeasure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got := Sizes{
		MeasuredBy: "go test ./internal/capacity -run TestMeasure -update",
		MeasuredOn: time.Now().UTC().Format(time.DateOnly),
	}
	got.Redis, got.RedisBytes = measureRedis(ctx, t)
	got.Postgres, got.ClaimsBytes, got.AuditBytes, got.AuditRowsPerEvent = measurePostgres(ctx, t)
	got.ArchiveBytes = measureArchive(ctx, t)
	got.CPU = benchCPU(t)

	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("sizes.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote sizes.json: %s", b)
		return
	}
	want, err := Measured()
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, w, g float64) {
		if math.Abs(g-w) > tolerance*w {
			t.Errorf("%s = %.0f measured, %.0f in sizes.json (more than %.0f%% apart): re-measure with go test ./internal/capacity -run TestMeasure -update",
				what, g, w, tolerance*100)
		}
	}
	for i, p := range want.RedisBytes {
		near(fmt.Sprintf("Redis bytes per record with a %d-byte result", p.ResultBytes), p.Bytes, got.RedisBytes[i].Bytes)
	}
	for i, p := range want.ClaimsBytes {
		near(fmt.Sprintf("claims bytes per record with a %d-byte result", p.ResultBytes), p.Bytes, got.ClaimsBytes[i].Bytes)
	}
	near("audit bytes per row", want.AuditBytes, got.AuditBytes)
	near("Parquet bytes per audit row", want.ArchiveBytes, got.ArchiveBytes)
	if want.AuditRowsPerEvent != got.AuditRowsPerEvent {
		t.Errorf("audit rows per event = %v measured, %v in sizes.json", got.AuditRowsPerEvent, want.AuditRowsPerEvent)
	}
	if want.CPU != got.CPU {
		t.Errorf("sizes.json CPU = %+v, bench/results.json gives %+v: re-measure with -update after make bench", want.CPU, got.CPU)
	}
}

// settled is the record of key after a claim, two transitions and a
// settle with result: what the fast tier holds for most of a window.
func settled(k tiers.Key, now time.Time, result []byte) tiers.Record {
	rec := tiers.NewRecord(claimParams(k, now))
	rec.State = tiers.StateSettled
	rec.Version = 3
	rec.Result = result
	rec.UpdatedAt = now
	return rec
}

func claimParams(k tiers.Key, now time.Time) tiers.ClaimParams {
	payload := make([]byte, 32)
	rand.Read(payload)
	return tiers.ClaimParams{
		Key: k, Now: now, Lease: time.Minute, TTL: 84 * time.Hour,
		PayloadHash: payload, Holder: "billing-worker-7d9f8b6c5-x2x4q/1",
		AttemptID: strings.Repeat("a", 43), // a base64url SHA-256 fingerprint
		Salt:      bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: bytes.Repeat([]byte{2}, tiers.SecretHashBytes),
	}
}

// eventKey is a key shaped like a real one: a Stripe event id.
func eventKey(i int) tiers.Key {
	return tiers.Key{Namespace: "billing", Provider: "stripe", Key: fmt.Sprintf("evt_3Q%022d", i)}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // incompressible, like a real receipt's worst case
	return b
}

// redisRecords is how many records measureRedis puts per result size, on
// an emptied server. Redis's keyspace and expiry tables double when they
// fill (at 1,024 keys, then 2,048) and move their buckets over a little per
// command after; 1,600 records leave both tables at 2,048 buckets with the
// move done (each Put steps it at least twice), 1.28 buckets per key, the
// middle of what a deployment pays (between 1 and 2 as its tables grow).
// Deltas between two steps of 500, as before, sometimes held a table's
// growth or the free of its old buckets and sometimes not.
const redisRecords = 1600

// measureRedis empties the server, puts redisRecords settled records and
// reads used_memory (less the clients' buffers) before and after, for each
// result size.
func measureRedis(ctx context.Context, t *testing.T) (string, []Point) {
	srv := testenv.StartRedis(t)
	st, err := redis.New(ctx, redis.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	opts, _ := goredis.ParseURL(srv.URL())
	raw := goredis.NewClient(opts)
	defer raw.Close()
	info := func(field string) string {
		s, err := raw.Info(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return v
			}
		}
		t.Fatalf("INFO has no %s", field)
		return ""
	}
	num := func(field string) float64 {
		v, err := strconv.ParseFloat(info(field), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// used_memory less the clients' buffers, which Redis grows and frees
	// on its own schedule (clientsCron) and which hold no record: with
	// them, the same records measured up to 20 bytes apart from run to
	// run.
	used := func() float64 { return num("used_memory") - num("mem_clients_normal") }
	now := time.Now()
	n := 0
	bytesPerRecord := func(size int) float64 {
		if err := raw.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
			t.Fatal(err)
		}
		before := used()
		for range redisRecords {
			n++
			if err := st.Put(ctx, settled(eventKey(n), now, randomBytes(size))); err != nil {
				t.Fatal(err)
			}
		}
		return math.Round((used() - before) / redisRecords)
	}
	// A first round, not counted, leaves behind what a server allocates
	// once (the connection's buffers among them).
	bytesPerRecord(0)
	var points []Point
	for _, size := range redisResultSizes {
		points = append(points, Point{ResultBytes: size, Bytes: bytesPerRecord(size)})
	}
	return info("redis_version"), points
}

// measurePostgres runs perStep events (claim, PROCESSING, SETTLED with the
// result) through the PostgreSQL store twice per result size, each size in
// its own database, and reads pg_total_relation_size after a VACUUM: the
// live rows with the space their updates left, which later rows reuse.
func measurePostgres(ctx context.Context, t *testing.T) (version string, claims []Point, auditPerRow, auditRowsPerEvent float64) {
	var auditBytes, auditRows float64
	for _, size := range postgresResultSizes {
		url := testenv.Postgres(t, postgres.Migrate)
		st, err := postgres.New(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SET search_path TO "+postgres.DefaultSchema); err != nil {
			t.Fatal(err)
		}
		if version == "" {
			if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
				t.Fatal(err)
			}
		}
		sizes := func() (claimsBytes, audit, rows float64) {
			if _, err := conn.Exec(ctx, "VACUUM claims"); err != nil {
				t.Fatal(err)
			}
			err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('claims'),
				(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = 'audit_log'::regclass),
				(SELECT count(*) FROM audit_log)`).Scan(&claimsBytes, &audit, &rows)
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		now := time.Now()
		n := 0
		events := func() {
			for range perStep {
				n++
				k := eventKey(n)
				res, err := st.Claim(ctx, claimParams(k, now))
				if err != nil || res.Outcome != tiers.OutcomeAcquired {
					t.Fatalf("Claim(%s) = %v, %v", k.Key, res.Outcome, err)
				}
				for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
					p := tiers.TransitionParams{Key: k, Now: now, Token: res.Record.Token, SecretHash: bytes.Repeat([]byte{2}, tiers.SecretHashBytes), To: to}
					if to.Terminal() {
						p.Result = randomBytes(size)
					}
					if _, _, err := st.Transition(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		events()
		c0, a0, r0 := sizes()
		events()
		c1, a1, r1 := sizes()
		claims = append(claims, Point{ResultBytes: size, Bytes: math.Round((c1 - c0) / perStep)})
		auditBytes += a1 - a0
		auditRows += r1 - r0
		auditRowsPerEvent = (r1 - r0) / perStep
		conn.Close(ctx)
		st.Close()
	}
	return version, claims, math.Round(auditBytes / auditRows), auditRowsPerEvent
}

// measureArchive runs perStep events (claim, PROCESSING, SETTLED) through
// the PostgreSQL store twice and exports the month's audit partition after
// each (claimd audit-export's code): the difference over the rows added is
// what a row costs in the Parquet file, its footer cancelled out. Unlike
// measurePostgres's, these events look like real traffic to a compressor:
// Stripe-like random event ids, and times 500 µs apart (2,000 events/s).
func measureArchive(ctx context.Context, t *testing.T) float64 {
	url := testenv.Postgres(t, postgres.Migrate)
	st, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	n := 0
	events := func() {
		for range perStep {
			n++
			k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_" + rand.Text()[:24]}
			now := start.Add(time.Duration(n) * 500 * time.Microsecond)
			res, err := st.Claim(ctx, claimParams(k, now))
			if err != nil || res.Outcome != tiers.OutcomeAcquired {
				t.Fatalf("Claim(%s) = %v, %v", k.Key, res.Outcome, err)
			}
			for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
				p := tiers.TransitionParams{Key: k, Now: now, Token: res.Record.Token, SecretHash: bytes.Repeat([]byte{2}, tiers.SecretHashBytes), To: to}
				if _, _, err := st.Transition(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	exported := func() (size float64, rows int64) {
		f, err := auditfile.Create(t.TempDir(), "month.parquet")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if rows, err = st.ExportAuditPartition(ctx, postgres.AuditPartitionName(start), f); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(f.Path())
		if err != nil {
			t.Fatal(err)
		}
		return float64(fi.Size()), rows
	}
	events()
	s0, r0 := exported()
	events()
	s1, r1 := exported()
	return math.Round((s1 - s0) / float64(r1-r0))
}

// benchCPU reads the CPU per call of claimd (Redis+PostgreSQL, claimload)
// from bench/results.json, the run BENCHMARKS.md reports.
func benchCPU(t *testing.T) CPU {
	raw, err := os.ReadFile("../../bench/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Finished string `json:"finished"`
		Runs     []struct {
			Target, Scenario, Client string
			Requests                 float64
			CPU                      map[string]float64 `json:"cpu_seconds"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	cost := func(scenario string) Cost {
		for _, run := range r.Runs {
			if run.Target == "claimd" && run.Scenario == scenario && run.Client == "claimload" && run.Requests > 0 {
				us := func(proc string) float64 { return math.Round(run.CPU[proc] / run.Requests * 1e6) }
				return Cost{Claimd: us("server"), Redis: us("redis"), Postgres: us("postgres")}
			}
		}
		t.Fatalf("bench/results.json has no claimd %s run of claimload", scenario)
		return Cost{}
	}
	return CPU{
		Source:    "bench/results.json of " + r.Finished + " (BENCHMARKS.md): claimd Redis+PostgreSQL, claimload, CPU seconds over requests",
		NewClaim:  cost("new"),
		Duplicate: cost("dup"),
		Lifecycle: cost("lifecycle"),
	}
}
