package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// crashEnv names the database a re-executed test binary claims in and then
// kills itself over, without closing anything; durabilityEnv its Durability.
const (
	crashEnv      = "CLAIMD_SQLITE_CRASH_CHILD_DB"
	durabilityEnv = "CLAIMD_SQLITE_CRASH_CHILD_DURABILITY"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path, os.Getenv(durabilityEnv))
	}
	os.Exit(m.Run())
}

// crashChild settles one key, claims another, and dies by SIGKILL: no Close,
// no checkpoint, no deferred function runs.
func crashChild(path, durability string) {
	ctx := context.Background()
	d, err := ParseDurability(durability)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s, err := New(ctx, Config{Path: path, Durability: d})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	a, err := s.Claim(ctx, claimAt("evt_settled", t0))
	if err == nil {
		_, _, err = s.Transition(ctx, tiers.TransitionParams{Key: key("evt_settled"), Now: t0, Token: a.Record.Token, SecretHash: ownerHash, To: tiers.StateFailed, Result: []byte("declined")})
	}
	if err == nil {
		_, err = s.Claim(ctx, claimAt("evt_open", t0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal arrives
}

// A commit returned to the caller survives the claimd process being killed,
// in both modes: FULL has fsynced it, and even relaxed (synchronous=NORMAL)
// has handed it to the OS before COMMIT returns. An OS crash or power loss
// cannot be staged here; what FULL adds for those is its fsync, which
// TestDurabilityPragma pins.
func TestCommitsSurviveProcessKill(t *testing.T) {
	for _, d := range []Durability{DurabilityFull, DurabilityRelaxed} {
		t.Run(d.String(), func(t *testing.T) {
			path := tempPath(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+path, durabilityEnv+"="+d.String())
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("crash child = %v, want killed by SIGKILL; output:\n%s", err, out)
			}
			if _, err := os.Stat(path + "-wal"); err != nil {
				t.Fatalf("no WAL left behind by the killed process (%v): the test would not test recovery", err)
			}

			s := newStore(t, path)
			later := t0.Add(time.Second)
			if res := mustClaim(t, s, claimAt("evt_settled", later)); res.Outcome != tiers.OutcomeDuplicate || string(res.Record.Result) != "declined" {
				t.Errorf("Claim(%q) after kill = %v result %q, want DUPLICATE declined", "evt_settled", res.Outcome, res.Record.Result)
			}
			if res := mustClaim(t, s, claimAt("evt_open", later)); res.Outcome != tiers.OutcomeInProgress {
				t.Errorf("Claim(%q) after kill = %v, want IN_PROGRESS", "evt_open", res.Outcome)
			}
		})
	}
}
