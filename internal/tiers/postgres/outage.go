package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connections after an outage.
//
// When PostgreSQL restarts (or fails over, or the network between drops
// every connection), each connection the pool opened before is dead, and
// the pool cannot tell until a statement is sent on it: pgxpool pings only
// a connection idle for over a second, and under load none is. Sent on a
// dead connection, a statement fails with the server's farewell (57P01
// admin_shutdown, 57P02 crash_shutdown, read by the first statement) or a
// reset, and whether it ran is then unknown to pgx, so a claim after the
// restart would fail closed for a connection from before it. Three things
// keep that from happening:
//
//   - before a connection is handed out, its socket is peeked at without
//     waiting (farewellPending): a server that stopped or restarted has
//     closed it, or left its farewell there, and the connection is
//     discarded unused, as are all of its generation (below);
//   - outageWatch sees every statement's error (a pgx tracer). The first
//     that says a connection was lost to the server going away ends a
//     generation of connections: every connection is stamped with the
//     generation it was opened in, and the pool's PrepareConn hook
//     discards, before any statement, a connection of an older generation.
//     The statements that found the outage fail (they were sent); none
//     after them is sent on a connection from before it. During the
//     outage new connections cannot open, and claims fail closed
//     (ErrUnavailable); once it ends they open fresh ones. A lost
//     connection of a server that did not go away (one backend
//     terminated) costs the pool one reconnect per connection.
//   - rounds retries a statement whose error pgconn.SafeToRetry says came
//     before anything was sent (a write to a closed socket, a connection
//     busy or closed before use): on a fresh connection, within the
//     call's bound of rounds.
type outageWatch struct {
	generation atomic.Uint64 // outages seen so far
}

// SQLSTATEs of a server going away under its sessions: stopping (or this
// backend terminated), or restarting after another backend crashed.
const (
	codeAdminShutdown = "57P01"
	codeCrashShutdown = "57P02"
)

// generationKey is where a connection keeps the generation it was opened
// in (pgconn.PgConn.CustomData).
const generationKey = "claimd.generation"

// install makes cfg's pool stamp and check generations and report errors
// to w. cfg must have no AfterConnect, PrepareConn or Tracer of its own.
func (w *outageWatch) install(cfg *pgxpool.Config) {
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		c.PgConn().CustomData()[generationKey] = w.generation.Load()
		return nil
	}
	// false, nil: the pool closes the connection and acquires another.
	cfg.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		g, _ := c.PgConn().CustomData()[generationKey].(uint64)
		if g != w.generation.Load() {
			return false, nil
		}
		if farewellPending(c.PgConn().Conn()) {
			w.generation.Add(1) // the server went away: so did its other sessions
			return false, nil
		}
		return true, nil
	}
	cfg.ConnConfig.Tracer = w
}

// saw ends the generation when err, from a statement whose caller had not
// given up, says its connection was lost to the server going away.
func (w *outageWatch) saw(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && connectionLost(err) {
		w.generation.Add(1)
	}
}

// connectionLost reports whether err says the server closed or dropped
// the connection (as opposed to refusing a statement, timing out, or the
// caller cancelling).
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeAdminShutdown, codeCrashShutdown, codeReadOnlyTx: // stopping, crashed, failed over
			return true
		}
		return sqlClass(pgErr.Code) == "08" // connection exception
	}
	if pgconn.Timeout(err) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// TraceQueryStart implements pgx.QueryTracer.
func (w *outageWatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (w *outageWatch) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	w.saw(ctx, d.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (w *outageWatch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (w *outageWatch) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.saw(ctx, d.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (w *outageWatch) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	w.saw(ctx, d.Err)
}

var (
	_ pgx.QueryTracer = (*outageWatch)(nil)
	_ pgx.BatchTracer = (*outageWatch)(nil)
)
