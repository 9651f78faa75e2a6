package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/claimd/claimd/internal/tiers"
)

// stmts are the statements of the hot path, prepared once on the write
// connection: parsing them again for every claim would cost about a quarter of
// a claim's CPU time.
type stmts struct {
	read, upsert, audit *sql.Stmt
}

func prepare(ctx context.Context, db *sql.DB) (*stmts, error) {
	var st stmts
	var err error
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{{&st.read, selectRecord}, {&st.upsert, upsertRecord}, {&st.audit, insertAudit}} {
		if *p.dst, err = db.PrepareContext(ctx, p.query); err != nil {
			st.close()
			return nil, err
		}
	}
	return &st, nil
}

func (st *stmts) close() error {
	var errs []error
	for _, s := range []*sql.Stmt{st.read, st.upsert, st.audit} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// txn is one write transaction: the read of the current record, the write of
// the decided one and its audit row, all under the write lock.
type txn struct {
	ctx context.Context
	tx  *sql.Tx
	st  *stmts
}

// read returns the record of k, or nil when there is none.
func (t *txn) read(k tiers.Key) (*tiers.Record, error) {
	return scanRecord(t.tx.StmtContext(t.ctx, t.st.read).QueryRowContext(t.ctx, k.Namespace, k.Provider, k.Key), k)
}

// put stores rec, replacing the record of its key.
func (t *txn) put(rec *tiers.Record) error {
	_, err := t.tx.StmtContext(t.ctx, t.st.upsert).ExecContext(t.ctx, recordArgs(rec)...)
	return err
}

// audit appends a to audit_log.
func (t *txn) audit(a auditRow) error {
	_, err := t.tx.StmtContext(t.ctx, t.st.audit).ExecContext(t.ctx, a.args()...)
	return err
}

// write runs fn in one BEGIN IMMEDIATE transaction on the single write
// connection and commits it. Claims of every key queue for that connection
// (in database/sql, honouring ctx), which is what makes concurrent claims of
// one key serialize. fn returns only storage errors; a decision that refuses
// the operation (stale token, …) is carried out of fn by the caller so that
// its audit row still commits.
//
// An error from write means nothing was committed: SQLite either commits the
// whole transaction or none of it, and database/sql rolls back rather than
// commits once ctx is done.
func (s *Store) write(ctx context.Context, op string, fn func(t *txn) error) error {
	if s.closed.Load() {
		return tiers.Unavailable("sqlite", errClosed)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(ctx, op, err)
	}
	if err := fn(&txn{ctx: ctx, tx: tx, st: s.wst}); err != nil {
		tx.Rollback()
		return s.fail(ctx, op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.fail(ctx, op, err)
	}
	return nil
}

// fail translates a storage error; a store closed under a running call is
// unavailable, not broken.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if s.closed.Load() && ctx.Err() == nil {
		return tiers.Unavailable("sqlite", fmt.Errorf("%s: %w: %w", op, errClosed, err))
	}
	return translate(ctx, op, err)
}
