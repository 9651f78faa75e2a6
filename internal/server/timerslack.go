package server

import (
	"fmt"
	"time"
)

// Timer slack.
//
// The kernel may wake a thread that sleeps with a timeout up to its timer
// slack late, so that nearby wake-ups share one interrupt; Linux gives every
// thread 50 µs unless told otherwise. The Go runtime's monitor thread
// (sysmon) sleeps 20 µs at a time for as long as it keeps finding
// processors to take back from system calls, which a busy claimd gives it
// many times a second (its writes to loopback sockets run the receiver's
// TCP path and outlast a round). At 50 µs of slack that is thousands of
// wake-ups a second, each a context switch that a virtual machine charges
// dearly for: about a tenth of claimd's CPU per new claim on the
// benchmark's VM (bench/NOTES.md). With records in PostgreSQL (and Redis),
// a slack of 1 ms halved sysmon's wake-ups and cost claimd 8–13 % less CPU
// per call and per webhook event there, with no worse latency.
//
// Not so with the embedded tiers: a SQLite commit's fsync holds a processor
// inside a system call until sysmon takes it back for the goroutines queued
// behind it, and a slack of 1 ms lets that wait up to 1 ms longer. Their
// CPU per event fell by a few per cent, but their p99 rose in five pairs of
// runs out of five. So --timer-slack's default, auto, is 1 ms when the
// records live in PostgreSQL and leaves the slack alone with the embedded
// tiers.
//
// The runtime starts sysmon before any of claimd's code runs, and a thread's
// slack can be set only by itself (or, for another thread, with
// CAP_SYS_NICE). A thread inherits the slack of the thread that creates it,
// and execve keeps it, so serve sets it on its own thread and executes its
// own binary again with the same arguments and environment: the new image's
// threads, sysmon first, all descend from that thread. The process keeps its
// PID, and nothing has been opened yet when it does so.

// outsideTimerSlack is auto's slack when the records live in PostgreSQL.
const outsideTimerSlack = time.Millisecond

// maxTimerSlack bounds --timer-slack: sysmon's longest sleep. A timer may
// fire that much late, and claimd's shortest, the first poll of a Claim
// that waits for a holder, is 2 ms.
const maxTimerSlack = 10 * time.Millisecond

// AutoTimerSlack is --timer-slack's default.
const AutoTimerSlack = "auto"

// timerSlackFor is the slack --timer-slack's value v asks for: a duration,
// or auto (outsideTimerSlack when the records live outside the process,
// and 0 otherwise). 0 keeps the slack claimd inherited.
func timerSlackFor(v string, outside bool) (time.Duration, error) {
	if v == AutoTimerSlack {
		if outside {
			return outsideTimerSlack, nil
		}
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxTimerSlack {
		return 0, fmt.Errorf("%w: --timer-slack %q: want auto or a duration from 0 to %v", ErrUsage, v, maxTimerSlack)
	}
	return d, nil
}

// timerSlackExecEnv marks the environment of the image serve executed to
// apply the slack, so that a kernel that did not keep it across execve is
// reported instead of executed again and again.
const timerSlackExecEnv = "CLAIMD_INTERNAL_TIMER_SLACK_EXEC"
