package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/claimd/claimd/clients/go/claimd"
)

// ledgerSchema has no UNIQUE constraint on event_id on purpose: the only
// thing that keeps one row per event is the claimd guard around the append,
// and the effect fence (claimd_effects, created in the same file on first
// use) it commits with.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS ledger (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id    TEXT    NOT NULL,
	event_type  TEXT    NOT NULL,
	object_id   TEXT    NOT NULL DEFAULT '',
	order_id    TEXT    NOT NULL DEFAULT '',
	amount      INTEGER NOT NULL,
	currency    TEXT    NOT NULL,
	recorded_at TEXT    NOT NULL
)`

// entry is one ledger row.
type entry struct {
	EventID    string
	EventType  string
	ObjectID   string // the charge or payment intent the event is about
	OrderID    string // the object's metadata.order_id
	Amount     int64  // booked: + money in, - money out, 0 a status
	Currency   string
	RecordedAt time.Time
}

// ledger is an append-only table in a SQLite file: the side effect that must
// happen once per event. Appends go through claimd.Effect (receiver.apply).
type ledger struct {
	db *sql.DB
}

// openLedger opens (and creates) the ledger at path.
func openLedger(ctx context.Context, path string) (*ledger, error) {
	dsn := "file:" + path + "?" + url.Values{"_pragma": {"busy_timeout(5000)", "journal_mode(WAL)"}}.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("ledger %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // one writer; SQLite serialises writes anyway
	if _, err := db.ExecContext(ctx, ledgerSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledger %s: %w", path, err)
	}
	return &ledger{db: db}, nil
}

// appendEntry adds e in tx (the event's effect) and returns its row id.
func appendEntry(ctx context.Context, tx claimd.EffectTx, e entry) (int64, error) {
	res, err := tx.ExecContext(ctx,
		`INSERT INTO ledger (event_id, event_type, object_id, order_id, amount, currency, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.EventID, e.EventType, e.ObjectID, e.OrderID, e.Amount, e.Currency, e.RecordedAt.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return 0, fmt.Errorf("ledger append %s: %w", e.EventID, err)
	}
	return res.LastInsertId()
}

// Count returns how many rows eventID has.
func (l *ledger) Count(ctx context.Context, eventID string) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE event_id = ?`, eventID).Scan(&n)
	return n, err
}

// refunded returns how much was booked out of charge by its refunds so far,
// read in tx (the refund's effect).
func refunded(ctx context.Context, tx claimd.EffectTx, charge string) (int64, error) {
	var out int64
	err := tx.QueryRowContext(ctx,
		`SELECT COALESCE(-SUM(amount), 0) FROM ledger WHERE object_id = ? AND event_type = 'charge.refunded'`, charge).Scan(&out)
	if err != nil {
		return 0, fmt.Errorf("ledger refunds of %s: %w", charge, err)
	}
	return out, nil
}

// Close closes the database.
func (l *ledger) Close() error { return l.db.Close() }
