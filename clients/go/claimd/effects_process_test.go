package claimd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimdtest"
)

// fxEvents is effectspec's -events for the Go receiver.
const fxEvents = "50"

// fxRunTimeout bounds one effectspec run; effectspec bounds each of its own
// waits (30 s), so this only catches a driver that hangs.
const fxRunTimeout = 4 * time.Minute

// TestEffectProcesses runs effectspec, the crash and zombie driver of
// clients/guardspec/README.md ("Effect processes"), with the Go receiver
// (../fxreceiver) on SQLite and on PostgreSQL: receivers killed with SIGKILL
// at every gate, paused with SIGSTOP past their lease and woken after a
// takeover, and a handler that raises inside its effect must each leave
// exactly one ledger row per event.
func TestEffectProcesses(t *testing.T) {
	dir := t.TempDir()
	effectspec := tool(t, effectspecPkg)
	receiver := buildFx(t, ".", "github.com/claimd/claimd/clients/go/fxreceiver", filepath.Join(dir, "fxreceiver"))

	for _, tc := range []struct {
		desc string
		db   func(t *testing.T) string
	}{
		{desc: "sqlite", db: func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "fx.db") }},
		{desc: "postgres", db: func(t *testing.T) string { return postgres(t) }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), fxRunTimeout)
			defer cancel()
			args := []string{"-claimd-bin", binary, "-db", tc.db(t), "-events", fxEvents, "--", receiver}
			cmd := exec.CommandContext(ctx, effectspec, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			t.Logf("effectspec %s (%.1fs):\n%s", strings.Join(args, " "), time.Since(start).Seconds(), stdout.String())
			if err != nil {
				t.Fatalf("effectspec: %v\n%s", err, stderr.String())
			}
			checkFxCounts(t, stdout.String())
		})
	}

	// The negative control: a receiver whose ledger row escapes the
	// effect's transaction must fail, or a pass above would prove nothing.
	t.Run("unfenced receiver fails", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), fxRunTimeout)
		defer cancel()
		args := []string{"-claimd-bin", binary, "-db", postgres(t), "-events", "5", "-scenarios", "raise", "--", receiver, "--unfenced"}
		out, err := exec.CommandContext(ctx, effectspec, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("effectspec %s = %v, want exit status 1 (violations)\n%s", strings.Join(args, " "), err, out)
		}
		for _, want := range []string{"raise: 5 events, 10 ledger rows, 5 written twice, 0 never written", ": written 2 times: ledger rows by writer R=2"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("effectspec's output lacks %q:\n%s", want, out)
			}
		}
	})
}

// fxCounts matches a counts line of a scenario that ran through.
var fxCounts = regexp.MustCompile(`(?m)^([a-z-]+): (\d+) events, (\d+) ledger rows, 0 written twice, 0 never written, `)

// checkFxCounts wants a clean counts line for each of the four scenarios,
// with every event written once: an exit status of 0 from a driver that
// ran nothing proves nothing.
func checkFxCounts(t *testing.T, out string) {
	t.Helper()
	got := map[string]bool{}
	for _, m := range fxCounts.FindAllStringSubmatch(out, -1) {
		if m[2] != fxEvents || m[3] != fxEvents {
			t.Errorf("%s: %s events and %s ledger rows, want %s of each", m[1], m[2], m[3], fxEvents)
		}
		got[m[1]] = true
	}
	for _, s := range []string{"crash", "zombie-new-first", "zombie-old-first", "raise"} {
		if !got[s] {
			t.Errorf("effectspec printed no clean counts line for %s", s)
		}
	}
}

// buildFx builds pkg in the module at dir (which lists pkg's requirements)
// into bin, with the compile flags of every other non-race build in the
// tests (claimdtest.BuildEnv): with go's defaults instead (cgo, no
// -trimpath), a cold build cache compiled the standard library, SQLite,
// pgx and gRPC once more for this one receiver, 90 s of CPU.
func buildFx(t *testing.T, dir, pkg, bin string) string {
	t.Helper()
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = dir
	build.Env = claimdtest.BuildEnv(os.Environ())
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, out)
	}
	return bin
}
