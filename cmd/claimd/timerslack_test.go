//go:build linux

package main

import (
	"os"
	"runtime"
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
		{"auto on PostgreSQL", pg, nil, 0, time.Millisecond, true}, // as --timer-slack's help says
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
			// executed itself (internal/server/timerslack.go marks it).
			env, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(env), "CLAIMD_INTERNAL_TIMER_SLACK_EXEC="); got != tc.restarted {
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
