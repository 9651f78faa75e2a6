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
	read, upsert, audit            *sql.Stmt
	savepoint, release, rollbackTo *sql.Stmt // batch.go
}

func prepare(ctx context.Context, db *sql.DB) (*stmts, error) {
	var st stmts
	var err error
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&st.read, selectRecord}, {&st.upsert, upsertRecord}, {&st.audit, insertAudit},
		{&st.savepoint, savepointSQL}, {&st.release, releaseSQL}, {&st.rollbackTo, rollbackToSQL},
	} {
		if *p.dst, err = db.PrepareContext(ctx, p.query); err != nil {
			st.close()
			return nil, err
		}
	}
	return &st, nil
}

func (st *stmts) close() error {
	var errs []error
	for _, s := range []*sql.Stmt{st.read, st.upsert, st.audit, st.savepoint, st.release, st.rollbackTo} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// txn is one write transaction of the committer (batch.go): for each write
// in it, the read of the current record, the write of the decided one and
// its audit row, all under the write lock.
type txn struct {
	// ctx is the batch's, never a caller's: a statement interrupted by one
	// caller leaving would roll back every caller's write (batch.go).
	ctx context.Context
	tx  *sql.Tx
	st  *stmts
	// step is Config.Step: the fault suite's crash points; nil otherwise.
	step func(string, tiers.Key)
}

// exec runs one of the prepared statements that take no arguments.
func (t *txn) exec(st *sql.Stmt) error {
	_, err := t.tx.StmtContext(t.ctx, st).ExecContext(t.ctx)
	return err
}

// read returns the record of k, or nil when there is none, and the state
// settling it moves its entity to ("" without one).
func (t *txn) read(k tiers.Key) (*tiers.Record, string, error) {
	return scanStored(t.tx.StmtContext(t.ctx, t.st.read).QueryRowContext(t.ctx, k.Namespace, k.Provider, k.Key), k)
}

// put stores rec, replacing the record of its key, with its entity's target
// state entityTo.
func (t *txn) put(rec *tiers.Record, entityTo string) error {
	_, err := t.tx.StmtContext(t.ctx, t.st.upsert).ExecContext(t.ctx, recordArgs(rec, entityTo)...)
	return err
}

// audit appends a to audit_log.
func (t *txn) audit(a auditRow) error {
	_, err := t.tx.StmtContext(t.ctx, t.st.audit).ExecContext(t.ctx, a.args()...)
	return err
}

// write runs fn in the committer's next transaction (batch.go) and returns
// once that transaction has committed, or fn or the transaction failed.
// Writes of every key queue for the one committer, which is what makes
// concurrent claims of one key serialize. fn returns only storage errors; a
// decision that refuses the operation (stale token, …) is carried out of fn
// by the caller and writes nothing (store.go's fenced). fn runs on the
// committer's goroutine and must use t's context, never the caller's.
//
// An error from fn or from BEGIN means nothing was written for this call.
// A failed COMMIT may have written it (batch.go says how each caller stays
// correct), and so may a call whose ctx ends while it waits: see below.
func (s *Store) write(ctx context.Context, op string, fn func(t *txn) error) error {
	if s.closed.Load() {
		return tiers.Unavailable("sqlite", errClosed)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A caller that leaves gets its context's error (fail passes it on):
	// before its write was queued, or before the committer took it,
	// nothing is written. While its batch runs, it may have been written:
	// the write may still commit, or have committed already, since the
	// committer checks a caller's context only before running its write,
	// and never stops a transaction for one caller. Like a claim whose
	// answer was lost on the wire, an ACQUIRED that committed unheard holds
	// the key under its lease (answered IN_PROGRESS, never DUPLICATE, until
	// it runs out); a settling Transition repeated with the same token
	// changes nothing.
	if _, err := s.commit.queue.Submit(ctx, fn); err != nil {
		if errors.Is(err, tiers.ErrQueueClosed) {
			return tiers.Unavailable("sqlite", errClosed) // closed since the check above
		}
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
