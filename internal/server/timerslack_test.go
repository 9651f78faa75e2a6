//go:build linux

package server

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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
