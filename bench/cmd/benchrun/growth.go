package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// Growth: how a new-key claim's cost grows with the work claimd has
// stored. One claimd (Redis + PostgreSQL) runs throughout; before each
// measurement its database is topped up to the next size with settled
// claims copied from one claimd itself claimed and settled (so every
// column, index and partition is claimd's own), each with the audit rows
// claimd wrote for it (the claim and its two transitions), in last month's
// audit partition. From growthRedisKeys stored
// claims on, Redis holds that many settled records too, put there by
// claimd (a duplicate of each, answered from PostgreSQL, repairs its
// copy). After the largest size, last month's partition is dropped by
// `claimd prune` while a new-key load runs.
const (
	targetGrowth    = "claimd-growth"
	growthPrefix    = "g" // the stored claims' event ids: g-0, g-1, …
	growthRedisKeys = 1_000_000
	// growthChunk is the claims inserted per statement (each its own
	// transaction): large enough to load quickly, small enough that no
	// transaction holds millions of rows' WAL.
	growthChunk = 500_000
)

// Growth is one measurement of the growth runs.
type Growth struct {
	StoredClaims int64 `json:"stored_claims"`
	// AuditRows are the rows of the audit log; RedisKeys the keys Redis
	// held when the run started.
	AuditRows int64 `json:"audit_rows"`
	RedisKeys int64 `json:"redis_keys"`
	// ClaimsBytes and AuditBytes are the tables' sizes with their indexes
	// (pg_total_relation_size), RedisBytes Redis's used_memory.
	ClaimsBytes int64   `json:"claims_bytes"`
	AuditBytes  int64   `json:"audit_bytes"`
	RedisBytes  int64   `json:"redis_bytes"`
	LoadSeconds float64 `json:"load_seconds"` // topping the database up to this size
	Run         Result  `json:"run"`
}

// PartitionDrop is the drop of a month's audit partition under load.
type PartitionDrop struct {
	Partition string  `json:"partition"`
	Rows      int64   `json:"rows"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"` // claimd prune, start to exit
	Output    string  `json:"output"`
	Run       Result  `json:"run"` // the new-key load it ran under
}

// runGrowth measures new-key claims at each of sizes stored claims.
func (b *bench) runGrowth(sizes []int64) error {
	if len(sizes) == 0 {
		return nil
	}
	return b.with(targetGrowth, "growth", func(t *target) error { return b.grow(t, sizes) })
}

// grow tops t's database up to each size in turn and measures there.
func (b *bench) grow(t *target, sizes []int64) error {
	ctx := b.ctx
	conn, err := pgx.Connect(ctx, b.pgURL("growth"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// The template: one event claimd claimed and settled, with its audit
	// rows.
	tmpl := growthPrefix + "-template"
	cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := pb.NewClaimServiceClient(cc)
	if err := settleKey(b.withToken(ctx), client, true, tmpl); err != nil {
		return fmt.Errorf("template event: %w", err)
	}
	month := monthStart(time.Now().UTC()).AddDate(0, -1, 0)
	partition := postgres.AuditPartitionName(month)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS claimd.%s PARTITION OF claimd.audit_log FOR VALUES FROM ('%s') TO ('%s')`,
		partition, month.Format(time.RFC3339), month.AddDate(0, 1, 0).Format(time.RFC3339))); err != nil {
		return fmt.Errorf("last month's audit partition: %w", err)
	}
	fill, err := growthStatements(ctx, conn, partition, month)
	if err != nil {
		return err
	}
	var stored int64
	filled := false
	for _, size := range sizes {
		g := Growth{StoredClaims: size}
		start := time.Now()
		for lo := stored; lo < size; lo += growthChunk {
			hi := min(lo+growthChunk, size)
			for _, sql := range fill {
				if _, err := conn.Exec(ctx, sql, lo, hi-1, tmpl); err != nil {
					return fmt.Errorf("loading claims %d to %d: %w", lo, hi, err)
				}
			}
		}
		stored = size
		// What autovacuum would have done by now in production.
		for _, sql := range []string{"VACUUM ANALYZE claimd.claims", "VACUUM ANALYZE claimd." + partition, "CHECKPOINT"} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		if size >= growthRedisKeys && !filled {
			if err := b.fillRedis(ctx, client, growthRedisKeys); err != nil {
				return err
			}
			filled = true
		}
		g.LoadSeconds = time.Since(start).Seconds()
		if err := b.storedSizes(ctx, conn, &g); err != nil {
			return err
		}
		res, err := b.counted(func() (Result, error) { return b.load(t, scenarioNew, clientClaimload) })
		if err != nil {
			return fmt.Errorf("%d stored claims: %w", size, err)
		}
		g.Run = res
		logf("%-16s %9d stored (loaded in %.0fs)  %8.0f %s  p50 %6.2fms  p99 %6.2fms  errors %d  cpu %s",
			targetGrowth, size, g.LoadSeconds, res.Rate, res.Unit, res.P50, res.P99, res.Errors, fmtCPU(res.CPU))
		b.report.Growth = append(b.report.Growth, g)
	}
	return b.dropUnderLoad(ctx, t, conn, partition, month)
}

// growthStatements are the statements that copy the template event's
// claim and audit rows to event ids growthPrefix-$1 … growthPrefix-$2, the
// audit rows into partition (last month, spread over it). Their column
// lists are read from the database: whatever claimd's migrations made.
func growthStatements(ctx context.Context, conn *pgx.Conn, partition string, month time.Time) ([]string, error) {
	columns := func(table string) ([]string, error) {
		rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = 'claimd' AND table_name = $1 ORDER BY ordinal_position`, table)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
	claims, err := columns("claims")
	if err != nil || len(claims) == 0 {
		return nil, fmt.Errorf("claims columns: %v (%d)", err, len(claims))
	}
	audit, err := columns("audit_log")
	if err != nil || len(audit) == 0 {
		return nil, fmt.Errorf("audit_log columns: %v (%d)", err, len(audit))
	}
	key := fmt.Sprintf("'%s-' || g", growthPrefix)
	sel := func(cols []string, alias string, replace map[string]string) (names, exprs string) {
		var n, e []string
		for _, c := range cols {
			r, ok := replace[c]
			if ok && r == "" {
				continue // left to its default
			}
			if !ok {
				r = alias + "." + c
			}
			n, e = append(n, c), append(e, r)
		}
		return strings.Join(n, ", "), strings.Join(e, ", ")
	}
	cn, ce := sel(claims, "c", map[string]string{"key": key})
	seconds := int64(month.AddDate(0, 1, 0).Sub(month).Seconds())
	an, ae := sel(audit, "a", map[string]string{
		"id": "", "key": key,
		"at": fmt.Sprintf("'%s'::timestamptz + make_interval(secs => (g %% %d))", month.Format(time.RFC3339), seconds),
	})
	return []string{
		fmt.Sprintf(`INSERT INTO claimd.claims (%s) SELECT %s FROM claimd.claims c, generate_series($1::bigint, $2::bigint) g WHERE c.key = $3`, cn, ce),
		fmt.Sprintf(`INSERT INTO claimd.audit_log (%s) SELECT %s FROM claimd.audit_log a, generate_series($1::bigint, $2::bigint) g WHERE a.key = $3`, an, ae),
	}, nil
}

// fillRedis has claimd put n of the stored claims into Redis: a duplicate
// of each, answered from PostgreSQL, repairs its copy.
func (b *bench) fillRedis(ctx context.Context, client pb.ClaimServiceClient, n int64) error {
	start := time.Now()
	ctx = b.withToken(ctx)
	err := forEach(32, n, func(i int64) error {
		resp, err := client.Claim(ctx, &pb.ClaimRequest{Namespace: benchNamespace, Provider: benchProvider,
			Key: &pb.ClaimRequest_EventId{EventId: fmt.Sprintf("%s-%d", growthPrefix, i)}, Holder: "benchrun"})
		if err != nil {
			return err
		}
		if resp.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE {
			return fmt.Errorf("claim of stored event %s-%d: %v, want DUPLICATE", growthPrefix, i, resp.GetOutcome())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("filling Redis: %w", err)
	}
	logf("%-16s Redis holds %d settled records (%.0fs)", targetGrowth, n, time.Since(start).Seconds())
	return nil
}

// storedSizes reads how much the servers hold.
func (b *bench) storedSizes(ctx context.Context, conn *pgx.Conn, g *Growth) error {
	err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('claimd.claims'),
		(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'claimd.audit_log'::regclass),
		(SELECT count(*) FROM claimd.audit_log)`).Scan(&g.ClaimsBytes, &g.AuditBytes, &g.AuditRows)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	opts, err := goredis.ParseURL(b.servers.Redis.URL())
	if err != nil {
		return err
	}
	rc := goredis.NewClient(opts)
	defer rc.Close()
	if g.RedisKeys, err = rc.DBSize(ctx).Result(); err != nil {
		return err
	}
	info, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			_, err = fmt.Sscan(v, &g.RedisBytes)
		}
	}
	return err
}

// dropUnderLoad runs `claimd prune` with a retention that ends at last
// month's end while a new-key load runs, and times it: dropping a month's
// partition must not stall the claims.
func (b *bench) dropUnderLoad(ctx context.Context, t *target, conn *pgx.Conn, partition string, month time.Time) error {
	d := PartitionDrop{Partition: partition}
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), pg_total_relation_size('claimd.%s') FROM claimd.%s`, partition, partition)).Scan(&d.Rows, &d.Bytes); err != nil {
		return err
	}
	// Every month up to and including last month lies wholly before
	// now - retention; the current one does not.
	retention := time.Since(month.AddDate(0, 1, 0)) - time.Minute
	type loaded struct {
		res Result
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		res, err := b.load(t, scenarioNew, clientClaimload)
		done <- loaded{res, err}
	}()
	// Into the load's middle (the load client's start-up is well under a
	// second); the load runs its whole duration either way.
	select {
	case <-time.After(b.opts.duration / 2):
	case <-ctx.Done():
		return ctx.Err()
	}
	start := time.Now()
	out, perr := exec.CommandContext(ctx, b.bin("claimd"), "prune", "--postgres-url", b.pgURL("growth"),
		"--retention", retention.Round(time.Second).String(), "--log-level", "warn").CombinedOutput()
	d.Seconds = time.Since(start).Seconds()
	d.Output = strings.TrimSpace(string(out))
	l := <-done
	if perr != nil {
		return fmt.Errorf("claimd prune: %w\n%s", perr, out)
	}
	if l.err != nil {
		return l.err
	}
	d.Run = l.res
	var left bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('claimd.`+partition+`') IS NOT NULL`).Scan(&left); err != nil {
		return err
	}
	if left {
		return fmt.Errorf("claimd prune --retention %v left %s: %s", retention, partition, d.Output)
	}
	logf("%-16s dropped %s (%d rows, %.1f GiB) in %.2fs under load (p99 %.2fms, errors %d)",
		targetGrowth, partition, d.Rows, float64(d.Bytes)/(1<<30), d.Seconds, l.res.P99, l.res.Errors)
	b.report.PartitionDrop = &d
	return nil
}

// monthStart is the first instant of t's month (UTC), as claimd's audit
// partitions begin.
func monthStart(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
