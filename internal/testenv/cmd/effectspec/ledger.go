package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/claimd/claimd/internal/textclip"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite"
)

// ledgerSchema is effects.ledger_schema of clients/guardspec/scenarios.json
// (a test holds it to the file): the receivers' ledger, deliberately without
// a unique constraint, so that an effect written twice shows as two rows.
const ledgerSchema = "CREATE TABLE IF NOT EXISTS guardspec_ledger (namespace TEXT NOT NULL, key TEXT NOT NULL, writer TEXT NOT NULL)"

// ledger is the runner's database, as -db names it: "sqlite:PATH" or a
// postgres:// URL. The receivers get the same string.
type ledger struct {
	db      *sql.DB
	dialect string // "sqlite" or "postgres"
}

// parseDB splits -db into its dialect and the database/sql driver and DSN.
func parseDB(s string) (dialect, driver, dsn string, err error) {
	switch {
	case strings.HasPrefix(s, "sqlite:"):
		path := strings.TrimPrefix(s, "sqlite:")
		if path == "" {
			return "", "", "", fmt.Errorf("-db %q: a path must follow \"sqlite:\"", s)
		}
		// A writer queued behind another's BEGIN IMMEDIATE waits, it does
		// not fail; WAL lets the checks read while receivers write.
		q := url.Values{"_pragma": {"busy_timeout(30000)", "journal_mode(WAL)"}}
		return "sqlite", "sqlite", "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode(), nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		return "postgres", "pgx", s, nil
	}
	return "", "", "", fmt.Errorf("-db %q: want sqlite:PATH or a postgres:// URL", textclip.Cut(s, maxEcho))
}

// openLedger opens the database and creates the ledger table.
func openLedger(ctx context.Context, s string) (*ledger, error) {
	dialect, driver, dsn, err := parseDB(s)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, ledgerSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create guardspec_ledger in %s: %w", dialect, err)
	}
	return &ledger{db: db, dialect: dialect}, nil
}

func (l *ledger) Close() error { return l.db.Close() }

// placeholder is the dialect's first bind parameter.
func (l *ledger) placeholder() string {
	if l.dialect == "postgres" {
		return "$1"
	}
	return "?"
}

// rows counts the ledger rows of namespace ns by key and writer.
func (l *ledger) rows(ctx context.Context, ns string) (map[string]map[string]int, error) {
	q := "SELECT key, writer, count(*) FROM guardspec_ledger WHERE namespace = " + l.placeholder() + " GROUP BY key, writer"
	rs, err := l.db.QueryContext(ctx, q, ns)
	if err != nil {
		return nil, fmt.Errorf("read guardspec_ledger: %w", err)
	}
	defer rs.Close()
	out := map[string]map[string]int{}
	for rs.Next() {
		var key, writer string
		var n int
		if err := rs.Scan(&key, &writer, &n); err != nil {
			return nil, err
		}
		if out[key] == nil {
			out[key] = map[string]int{}
		}
		out[key][writer] += n
	}
	return out, rs.Err()
}

// fences reads the claimd_effects rows of namespace ns and provider stripe
// by key. The receivers' guards create the table on first use.
func (l *ledger) fences(ctx context.Context, ns string) (map[string][]fenceRow, error) {
	q := "SELECT key, fencing_token, result FROM claimd_effects WHERE provider = 'stripe' AND namespace = " + l.placeholder()
	rs, err := l.db.QueryContext(ctx, q, ns)
	if err != nil {
		return nil, fmt.Errorf("read claimd_effects (which the receivers' guards create on first use): %w", err)
	}
	defer rs.Close()
	out := map[string][]fenceRow{}
	for rs.Next() {
		var key string
		var token int64
		var result []byte
		if err := rs.Scan(&key, &token, &result); err != nil {
			return nil, err
		}
		out[key] = append(out[key], fenceRow{Token: uint64(token), Result: string(result)})
	}
	return out, rs.Err()
}
