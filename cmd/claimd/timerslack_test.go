//go:build linux

package main

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// TestServeTimerSlack runs the binary: serve gives its threads the timer
// slack --timer-slack asks for by executing itself once more (same PID,
// one "go runtime" line), and leaves the inherited slack alone when it
// already is that, when the flag is 0, and by default (auto) with the
// embedded tiers.
func TestServeTimerSlack(t *testing.T) {
	inherited, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	pg := func(t *testing.T) []string { return []string{"--postgres-url", testenv.Postgres(t, postgres.Migrate)} }
	embedded := func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} }
	tests := []struct {
		name      string
		tiers     func(t *testing.T) []string
		args      []string
		parent    time.Duration // the slack claimd inherits (0: the test's own)
		want      time.Duration
		restarted bool
	}{
		{"auto on PostgreSQL", pg, nil, 0, outsideTimerSlack, true},
		{"auto on the embedded tiers", embedded, nil, 0, time.Duration(inherited), false},
		{"a duration", embedded, []string{"--timer-slack", "2ms"}, 0, 2 * time.Millisecond, true},
		{"zero keeps the inherited slack", pg, []string{"--timer-slack", "0"}, 0, time.Duration(inherited), false},
		{"already the slack asked for", embedded, []string{"--timer-slack", "3ms"}, 3 * time.Millisecond, 3 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := startWithSlack(t, tc.parent, append(tc.tiers(t), tc.args...)...)
			waitServing(t, p.conn(t))
			checkTimerSlack(t, p, tc.want)
			// The environment of the last execve says whether serve
			// executed itself.
			env, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(env), timerSlackExecEnv+"="); got != tc.restarted {
				t.Errorf("claimd executed itself again: %v, want %v", got, tc.restarted)
			}
			var runtimeLines []string
			for _, line := range p.logs.all() {
				if strings.Contains(line, `"msg":"go runtime"`) {
					runtimeLines = append(runtimeLines, line)
				}
			}
			want := `"timer_slack":"` + tc.want.String() + `"`
			if len(runtimeLines) != 1 || !strings.Contains(runtimeLines[0], want) {
				t.Errorf(`"go runtime" lines = %q, want one with %s`, runtimeLines, want)
			}
			p.stop(t)
		})
	}
}

// checkTimerSlack fails t unless the serving claimd p runs with a timer
// slack of want and logged no warning about it.
func checkTimerSlack(t *testing.T, p *proc, want time.Duration) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.FormatInt(want.Nanoseconds(), 10) {
		t.Errorf("timer slack of claimd = %s ns, want %d", got, want.Nanoseconds())
	}
	for _, line := range p.logs.all() {
		if strings.Contains(line, "timer slack not applied") {
			t.Errorf("claimd logged %s", line)
		}
	}
}

// startWithSlack is start with claimd forked from a thread whose timer slack
// is slack (0: the test's own), which claimd inherits.
func startWithSlack(t *testing.T, slack time.Duration, args ...string) *proc {
	t.Helper()
	if slack == 0 {
		return start(t, args...)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0)
	return start(t, args...)
}

// TestApplyTimerSlackWithoutRestart: a failed execve leaves the process
// running with the slack it had, the calling thread's included, and an
// image that was executed to apply the slack but runs without it says so
// instead of executing itself again.
func TestApplyTimerSlackWithoutRestart(t *testing.T) {
	runtime.LockOSThread() // the thread applyTimerSlack sets, read back below
	defer runtime.UnlockOSThread()
	before, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Duration(before) + time.Millisecond

	var restartEnv []string
	got, err := applyTimerSlack(want, func(env []string) error {
		restartEnv = env
		return errors.New("no /proc here")
	})
	if err == nil || !strings.Contains(err.Error(), "no /proc here") || got != time.Duration(before) {
		t.Errorf("applyTimerSlack with a failing restart = %v, %v; want %v and its error", got, err, time.Duration(before))
	}
	if !slices.Contains(restartEnv, timerSlackExecEnv+"=1") {
		t.Errorf("restart's environment lacks %s=1", timerSlackExecEnv)
	}
	if after, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0); after != before {
		t.Errorf("the calling thread's slack after a failed restart = %d ns, want %d back", after, before)
	}

	t.Setenv(timerSlackExecEnv, "1")
	got, err = applyTimerSlack(want, func([]string) error {
		t.Error("restarted again after a restart")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "did not keep") || got != time.Duration(before) {
		t.Errorf("applyTimerSlack after a restart that lost the slack = %v, %v; want %v and an error", got, err, time.Duration(before))
	}
	if _, set := os.LookupEnv(timerSlackExecEnv); set {
		t.Errorf("%s is still in the environment", timerSlackExecEnv)
	}
}
