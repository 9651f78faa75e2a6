package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExecSelf is Config.Reexec on Linux: /proc/self/exe is this process's binary even
// if its file was replaced or removed since it started. Where no /proc is
// mounted (a bare chroot), an absolute path claimd was started by, such as
// the image's /claimd, names it too.
func ExecSelf(env []string) error {
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	if errors.Is(err, syscall.ENOENT) && filepath.IsAbs(os.Args[0]) {
		err = syscall.Exec(os.Args[0], os.Args, env)
	}
	return err
}

// applyTimerSlack gives every thread of the process a timer slack of want
// (0: leaves the inherited one) and returns the slack the process runs
// with. When the slack differs and reexec (Config.Reexec) is not nil, it sets want on the
// calling thread and executes claimd again from there, which returns only if
// that failed. An error leaves the process running with the slack returned.
func applyTimerSlack(want time.Duration, reexec func(env []string) error) (time.Duration, error) {
	_, execed := os.LookupEnv(timerSlackExecEnv)
	os.Unsetenv(timerSlackExecEnv)
	cur, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the timer slack: %w", err)
	}
	got := time.Duration(cur)
	switch {
	case want == 0 || got == want || reexec == nil:
		return got, nil
	case execed:
		return got, fmt.Errorf("the kernel did not keep a timer slack of %v across execve", want)
	}
	// The slack is the calling thread's: set it and execute on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(want), 0, 0, 0); err != nil {
		return got, fmt.Errorf("setting the timer slack: %w", err)
	}
	err = reexec(append(os.Environ(), timerSlackExecEnv+"=1"))
	// Still here: the execve failed (no /proc, say). This thread goes back
	// to the slack every other thread has.
	return got, errors.Join(fmt.Errorf("executing claimd again with a timer slack of %v: %w", want, err),
		unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(cur), 0, 0, 0))
}
