package postgres

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds of PartitionClaims' partition count.
const (
	MinClaimPartitions = 2
	MaxClaimPartitions = 1024
)

// PartitionClaims turns the claims table of cfg.Schema (migrated to the
// current version) into one hash-partitioned into n partitions on its whole
// primary key (namespace, provider, key), as docs/scaling.md describes.
// The partition key is the record's identity, so the primary key, and with
// it the uniqueness every claim relies on, still holds across partitions
// (a table partitioned by time could not promise that). Every query runs
// unchanged.
//
// It copies the rows in one transaction under an ACCESS EXCLUSIVE lock:
// claims wait (and may time out as UNAVAILABLE, which providers retry)
// until it commits, so run it when traffic is low. It refuses a table
// that is already partitioned, and holds the schema lock that migrations
// take, so it never runs beside a migration.
func PartitionClaims(ctx context.Context, cfg Config, n int) error {
	if n < MinClaimPartitions || n > MaxClaimPartitions {
		return fmt.Errorf("postgres: partition claims: %d partitions, want %d to %d", n, MinClaimPartitions, MaxClaimPartitions)
	}
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return err
	}
	schema := cmp.Or(cfg.Schema, DefaultSchema)
	conn, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig)
	if err != nil {
		return fail(ctx, "partition claims: connect", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, schemaLockKey); err != nil {
		return fail(ctx, "partition claims: lock", err)
	}
	claims := pgx.Identifier{schema, "claims"}.Sanitize()
	var kind string
	if err := conn.QueryRow(ctx, `SELECT c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'claims'`, schema).Scan(&kind); err != nil {
		return fail(ctx, "partition claims: find "+claims+" (run claimd migrate first)", err)
	}
	if kind == "p" {
		return fmt.Errorf("postgres: partition claims: %s is already partitioned", claims)
	}
	plain := pgx.Identifier{schema, "claims_unpartitioned"}.Sanitize()
	stmts := []string{
		`LOCK TABLE ` + claims + ` IN ACCESS EXCLUSIVE MODE`,
		`ALTER TABLE ` + claims + ` RENAME TO claims_unpartitioned`,
		`CREATE TABLE ` + claims + ` (LIKE ` + plain + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
			PARTITION BY HASH (namespace, provider, key)`,
		`ALTER TABLE ` + claims + ` ADD PRIMARY KEY (namespace, provider, key)`,
	}
	for i := range n {
		part := pgx.Identifier{schema, fmt.Sprintf("claims_p%d", i)}.Sanitize()
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s
			FOR VALUES WITH (MODULUS %d, REMAINDER %d) WITH (fillfactor = 80)`, part, claims, n, i))
	}
	stmts = append(stmts,
		`INSERT INTO `+claims+` SELECT * FROM `+plain,
		`DROP TABLE `+plain,
		`CREATE INDEX claims_window_expires_at ON `+claims+` (window_expires_at)`,
		`ANALYZE `+claims,
	)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fail(ctx, "partition claims", err)
			}
		}
		return nil
	})
}
