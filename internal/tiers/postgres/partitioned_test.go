package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// hashPartitions is how many partitions the test splits claims into.
const hashPartitions = 8

// partitionClaims turns the migrated claims table of the database at url
// into one hash-partitioned on its whole primary key, as docs/scaling.md
// describes: the partition key is the record's identity, so the primary
// key, and with it the uniqueness every claim relies on, still holds
// across partitions.
func partitionClaims(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stmts := []string{
		// The tables live in claimd's schema; new ones go there too.
		`SET LOCAL search_path TO ` + postgres.DefaultSchema,
		`ALTER TABLE claims RENAME TO claims_plain`,
		`CREATE TABLE claims (LIKE claims_plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
			PARTITION BY HASH (namespace, provider, key)`,
		`ALTER TABLE claims ADD PRIMARY KEY (namespace, provider, key)`,
	}
	for i := range hashPartitions {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE claims_p%d PARTITION OF claims
			FOR VALUES WITH (MODULUS %d, REMAINDER %d) WITH (fillfactor = 80)`, i, hashPartitions, i))
	}
	stmts = append(stmts,
		`INSERT INTO claims SELECT * FROM claims_plain`,
		`DROP TABLE claims_plain`,
		`CREATE INDEX claims_window_expires_at ON claims (window_expires_at)`,
	)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestConformanceHashPartitionedClaims holds the PostgreSQL tier to the
// storage contract with its claims table hash-partitioned by identity (the
// option docs/scaling.md describes for a table past one primary's comfort):
// every query runs unchanged. The subtests share the database.
func TestConformanceHashPartitionedClaims(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	partitionClaims(t, url)
	tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
		return func(t *testing.T) tiers.Durable {
			s, err := postgres.New(context.Background(), postgres.Config{URL: url})
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			return s
		}
	})
}
