package claimd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/claimd/claimd/clients/go/claimd"
)

// errorLog keeps the records of level Error and above.
type errorLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

// lines renders each record as its message and attributes.
func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// TestGuardLogsHandlerErrorOnce: Guard answers a handler's error with a 500
// and returns it only in Outcome.Err, so it logs it: once, at Error, with
// the key. A PermanentError is the handler's answer, recorded as FAILED,
// and not logged as an error.
func TestGuardLogsHandlerErrorOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc      string
		err       error
		wantLines int
	}{
		{desc: "a retryable error", err: errors.New("bank timeout (test)"), wantLines: 1},
		{desc: "a permanent error", err: claimd.Permanent(errors.New("account closed (test)")), wantLines: 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			log := &errorLog{}
			c := dial(t, shared.Addr, claimd.WithLogger(slog.New(log)))
			id := eventID(t)
			out := c.Guard(ctxT(t), stripe(id), func(context.Context, claimd.Claim) ([]byte, error) { return nil, tc.err })
			if !errors.Is(out.Err, tc.err) {
				t.Fatalf("Guard(%q) Err = %v, want the handler's %v", id, out.Err, tc.err)
			}
			lines := log.lines()
			if len(lines) != tc.wantLines {
				t.Fatalf("Guard(%q) logged %d Error lines %q, want %d", id, len(lines), lines, tc.wantLines)
			}
			for _, line := range lines {
				if !strings.Contains(line, id) || !strings.Contains(line, tc.err.Error()) {
					t.Errorf("Guard(%q) logged %q, want the key and the handler's error", id, line)
				}
			}
		})
	}
}
