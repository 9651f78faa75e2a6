package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the embedded tier's driver, to read its audit log

	"github.com/claimd/claimd/internal/chaos"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// readAudit reads the grants of the durable audit log (claims answered
// ACQUIRED) once the replicas have stopped.
func (e *env) readAudit(ctx context.Context, mode string) ([]chaos.Grant, error) {
	if mode == modeEmbedded {
		return sqliteGrants(ctx, filepath.Join(e.dataDir, "claimd.db"))
	}
	return postgresGrants(ctx, e.dbURL)
}

// postgresGrants reads audit_log; outcome 1 is tiers.OutcomeAcquired.
func postgresGrants(ctx context.Context, url string) ([]chaos.Grant, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	// claimd's tables live in its schema (the replicas run with the default).
	table := pgx.Identifier{postgres.DefaultSchema, "audit_log"}.Sanitize()
	rows, err := conn.Query(ctx, `SELECT key, token, holder, at FROM `+table+`
		WHERE op = 'claim' AND outcome = 1 AND namespace = $1`, namespace)
	if err != nil {
		return nil, err
	}
	grants := []chaos.Grant{}
	for rows.Next() {
		var g chaos.Grant
		var token int64
		var at time.Time
		if err := rows.Scan(&g.Key, &token, &g.Holder, &at); err != nil {
			return nil, err
		}
		g.Token, g.At = uint64(token), at.UnixNano()
		grants = append(grants, g)
	}
	return grants, rows.Err()
}

// sqliteGrants reads the embedded tier's audit_log (at in unix microseconds).
func sqliteGrants(ctx context.Context, path string) ([]chaos.Grant, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT key, token, holder, at FROM audit_log
		WHERE op = 'claim' AND outcome = 'ACQUIRED' AND namespace = ?`, namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer rows.Close()
	grants := []chaos.Grant{}
	for rows.Next() {
		var g chaos.Grant
		var token, at int64
		if err := rows.Scan(&g.Key, &token, &g.Holder, &at); err != nil {
			return nil, err
		}
		g.Token, g.At = uint64(token), at*1000
		grants = append(grants, g)
	}
	return grants, rows.Err()
}
