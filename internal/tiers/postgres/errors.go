package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimd/claimd/internal/tiers"
)

// SQLSTATEs this package acts on.
const (
	codeUniqueViolation  = "23505"
	codeCheckViolation   = "23514" // also "no partition of relation … found for row"
	codeUndefinedTable   = "42P01"
	codeReadOnlyTx       = "25006" // connected to a standby (e.g. during a failover)
	codeLockNotAvailable = "55P03" // lock_timeout

	// What reading another application's schema_migrations may meet.
	codeUndefinedColumn           = "42703"
	codeInvalidSchemaName         = "3F000"
	codeInsufficientPrivilege     = "42501"
	codeInvalidTextRepresentation = "22P02"
	codeNumericOutOfRange         = "22003"
)

// fail translates a database error of operation op into the error the
// caller sees:
//
//   - the caller's context ended: its error, unwrapped;
//   - the database could not be reached or did not answer: an error wrapping
//     tiers.ErrUnavailable;
//   - anything else (a bug, a schema mismatch): a plain error.
//
// An error after a statement was sent (a timeout, a dropped connection, a
// cancelled context) says nothing about whether it committed. Every caller
// stays correct either way: a claim that committed unheard holds the key
// under a lease, so the provider's retry is answered IN_PROGRESS (or, with
// the same attempt_id, the same ACQUIRED) and takes over once the lease ends,
// never DUPLICATE, because a claim never writes a terminal state; a
// transition, renew or release that committed unheard is answered as a no-op
// success (or by the next step's fencing) when the handler repeats it.
func fail(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if unreachable(err) {
		return tiers.Unavailable("postgres", fmt.Errorf("%s: %w", op, err))
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// unreachable reports whether err means the database could not serve the
// statement for now, as opposed to refusing it.
func unreachable(err error) bool {
	// Connecting failed (refused, timed out, authentication, too many
	// clients): nothing was sent. pgxpool returns this from Acquire.
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeReadOnlyTx, codeLockNotAvailable:
			return true
		}
		switch sqlClass(pgErr.Code) {
		case "08", // connection exception
			"40", // transaction rollback: serialization failure, deadlock
			"53", // insufficient resources: too many connections, disk full, out of memory
			"57", // operator intervention: admin/crash shutdown (57P01, 57P02), cannot connect now, statement_timeout
			"58": // system error: I/O error
			return true
		}
		return false
	}
	// Not an answer from the server: the connection failed under us (reset,
	// closed by the server, broken pipe) or timed out.
	var netErr net.Error
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &netErr)
}

// sqlClass returns the class (first two characters) of a SQLSTATE.
func sqlClass(code string) string {
	if len(code) < 2 {
		return code
	}
	return code[:2]
}

// sqlState returns err's SQLSTATE, or "" when err is not from the server.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isUndefinedTable reports a statement on a table that does not exist (the
// schema was never migrated).
func isUndefinedTable(err error) bool { return sqlState(err) == codeUndefinedTable }

// isUniqueViolation reports a conflict on a unique key: another writer got
// there first. For a claim it means "already claimed": decide again against
// the row that won, never an internal error.
func isUniqueViolation(err error) bool { return sqlState(err) == codeUniqueViolation }

// isMissingAuditPartition reports a write whose audit row has no partition
// for its month.
func isMissingAuditPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == codeCheckViolation && pgErr.TableName == "audit_log"
}
