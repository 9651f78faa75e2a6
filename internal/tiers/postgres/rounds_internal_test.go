package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimd/claimd/internal/tiers"
)

// unsent is an error pgconn.SafeToRetry accepts: nothing reached the server.
type unsent struct{}

func (unsent) Error() string     { return "write failed before anything was sent" }
func (unsent) SafeToRetry() bool { return true }

// TestRoundsResendsUnsentStatements: a round whose statement failed before
// it was sent runs again (on another connection, the pool's choice); one
// that may have reached the server does not, nor one whose caller gave up.
func TestRoundsResendsUnsentStatements(t *testing.T) {
	s := &Store{}
	k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		desc       string
		ctx        context.Context
		first      error
		wantRounds int
		wantErr    bool
	}{
		{"unsent: sent again", context.Background(), unsent{}, 2, false},
		{"sent, then lost: not again", context.Background(), errors.New("unexpected EOF"), 1, true},
		{"unsent, caller gone: not again", cancelled, unsent{}, 1, true},
	} {
		n := 0
		err := s.rounds(tc.ctx, "claim", k, time.Now(), func() (bool, error) {
			n++
			if n == 1 {
				return false, tc.first
			}
			return true, nil
		})
		if n != tc.wantRounds || (err != nil) != tc.wantErr {
			t.Errorf("%s: rounds ran %d times, error %v; want %d, error %v", tc.desc, n, err, tc.wantRounds, tc.wantErr)
		}
	}
}

// TestConnectionLost: the errors that end a generation of connections are
// the server going away, not its refusals, timeouts or the caller's end.
func TestConnectionLost(t *testing.T) {
	for _, tc := range []struct {
		desc string
		err  error
		want bool
	}{
		{"admin shutdown", &pgconn.PgError{Code: codeAdminShutdown}, true},
		{"crash shutdown", &pgconn.PgError{Code: codeCrashShutdown}, true},
		{"a standby now", &pgconn.PgError{Code: codeReadOnlyTx}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"end of file", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{"unique violation", &pgconn.PgError{Code: codeUniqueViolation}, false},
		{"lock timeout", &pgconn.PgError{Code: codeLockNotAvailable}, false},
		{"cancelled", context.Canceled, false},
	} {
		if got := connectionLost(tc.err); got != tc.want {
			t.Errorf("connectionLost(%s: %v) = %v, want %v", tc.desc, tc.err, got, tc.want)
		}
	}
}
