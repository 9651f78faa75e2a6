package postgres_test

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers/postgres"
)

func TestClaimsTableIsPlainWithUniqueKey(t *testing.T) {
	e := newEnv(t)
	var kind string
	if err := e.db.QueryRow(e.ctx(), `SELECT relkind::text FROM pg_class WHERE oid = 'claims'::regclass`).Scan(&kind); err != nil {
		t.Fatal(err)
	}
	// 'r' is an ordinary table; 'p' would be partitioned, whose unique keys
	// must include the partition column and so could not stop a duplicate.
	if kind != "r" {
		t.Fatalf("claims relkind = %q, want %q (an ordinary, unpartitioned table)", kind, "r")
	}
	rows, _ := e.db.Query(e.ctx(), `
		SELECT array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = 'claims'::regclass AND i.indisunique
		GROUP BY i.indexrelid`)
	unique, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"namespace", "provider", "key"}}, unique); diff != "" {
		t.Errorf("unique indexes of claims (-want +got):\n%s", diff)
	}
	var windowIndexed bool
	if err := e.db.QueryRow(e.ctx(), `
		SELECT EXISTS (SELECT 1 FROM pg_index i
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = 'claims'::regclass AND a.attname = 'window_expires_at')`).Scan(&windowIndexed); err != nil {
		t.Fatal(err)
	}
	if !windowIndexed {
		t.Errorf("claims has no index led by window_expires_at; Prune would scan the table")
	}
}

func TestAuditLogIsPartitionedByMonthWithBRIN(t *testing.T) {
	e := newEnv(t)
	var (
		strategy, column string
		hasDefault       bool
	)
	if err := e.db.QueryRow(e.ctx(), `
		SELECT p.partstrat::text, a.attname::text, p.partdefid <> 0
		FROM pg_partitioned_table p
		JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
		WHERE p.partrelid = 'audit_log'::regclass`).Scan(&strategy, &column, &hasDefault); err != nil {
		t.Fatalf("audit_log is not partitioned: %v", err)
	}
	if strategy != "r" || column != "at" {
		t.Errorf("audit_log partitioned by %q on %q, want range (r) on at", strategy, column)
	}
	if hasDefault {
		t.Errorf("audit_log has a DEFAULT partition; retention could not drop its rows by partition")
	}
	// BRIN on at for time ranges; one B-tree to read a key's log
	// (0007_audit_key), and no other: each costs every audited write.
	var methods []string
	if err := e.db.QueryRow(e.ctx(), `
		SELECT coalesce(array_agg(c.relname::text || ' ' || am.amname::text || ' ' || pg_get_indexdef(c.oid, 0, false) ORDER BY c.relname), '{}')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
		WHERE i.indrelid = 'audit_log'::regclass`).Scan(&methods); err != nil {
		t.Fatal(err)
	}
	for i, m := range methods { // the definition's schema varies
		methods[i] = regexp.MustCompile(`ON ONLY \S+ `).ReplaceAllString(m, "ON ONLY audit_log ")
	}
	want := []string{
		"audit_log_at brin CREATE INDEX audit_log_at ON ONLY audit_log USING brin (at)",
		"audit_log_key btree CREATE INDEX audit_log_key ON ONLY audit_log USING btree (namespace, provider, key, at, id)",
	}
	if diff := cmp.Diff(want, methods); diff != "" {
		t.Errorf("index methods on audit_log (-want +got):\n%s", diff)
	}
	have := partitionSet(t, e)
	now := time.Now().UTC()
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for m := range 4 {
		if name := monthPartition(first.AddDate(0, m, 0)); !have[name] {
			t.Errorf("audit partition %s is missing; New makes this month's and three ahead (have %v)", name, have)
		}
	}
}

func TestConcurrentMigrateAppliesEachVersionOnce(t *testing.T) {
	url := freshDatabase(t)
	ctx := context.Background()
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = postgres.Migrate(ctx, url)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate #%d error = %v", i, err)
		}
	}
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Errorf("Migrate(again) error = %v", err)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT version FROM claimd.claimd_schema_migrations ORDER BY version`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for v := 1; v <= postgres.SchemaVersion(); v++ {
		want = append(want, int32(v))
	}
	if diff := cmp.Diff(want, versions); diff != "" {
		t.Errorf("claimd_schema_migrations versions (-want +got):\n%s", diff)
	}
}

func TestNewRefusesUnmigratedDatabase(t *testing.T) {
	url := freshDatabase(t)
	ctx := context.Background()
	if s, err := postgres.New(ctx, postgres.Config{URL: url}); err == nil || !strings.Contains(err.Error(), "claimd migrate") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("New(unmigrated) error = %v, want one telling to run claimd migrate", err)
	}
	s, err := postgres.New(ctx, postgres.Config{URL: url, Migrate: true})
	if err != nil {
		t.Fatalf("New(Migrate: true) error = %v", err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping() error = %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		desc string
		cfg  postgres.Config
		want string
	}{
		{"empty URL", postgres.Config{}, "URL"},
		{"unparsable URL", postgres.Config{URL: "postgres://u:secret@[::1"}, "URL"},
		{"negative MaxConns", postgres.Config{URL: "postgres://127.0.0.1/x", MaxConns: -1}, "MaxConns"},
		{"negative ConnectTimeout", postgres.Config{URL: "postgres://127.0.0.1/x", ConnectTimeout: -1}, "ConnectTimeout"},
		{"schema name PostgreSQL would truncate", postgres.Config{URL: "postgres://127.0.0.1/x", Schema: strings.Repeat("s", 64)}, "Schema is 64 bytes"},
		{"schema name of PostgreSQL's own", postgres.Config{URL: "postgres://127.0.0.1/x", Schema: "pg_catalog"}, "Schema"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := postgres.New(context.Background(), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New(%+v) error = nil, want one naming %s", tc.cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) error = %v, want one naming %s", tc.cfg, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("New() error %q shows the password", err)
			}
		})
	}
}
