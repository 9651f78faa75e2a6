package main

import "time"

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
// dearly for: 10–11 % of claimd's CPU per new claim on the benchmark's VM
// (bench/NOTES.md). A slack of 1 ms bounds sysmon at about a thousand
// wake-ups a second and cost claimd 10–12 % less CPU per new claim and per
// lifecycle event there, with no worse latency.
//
// The runtime starts sysmon before any of claimd's code runs, and a thread's
// slack can be set only by itself (or, for another thread, with
// CAP_SYS_NICE). A thread inherits the slack of the thread that creates it,
// and execve keeps it, so serve sets it on its own thread and executes its
// own binary again with the same arguments and environment: the new image's
// threads, sysmon first, all descend from that thread. The process keeps its
// PID, and nothing has been opened yet when it does so.

// defaultTimerSlack is --timer-slack's default.
const defaultTimerSlack = time.Millisecond

// maxTimerSlack bounds --timer-slack: sysmon's longest sleep, and far below
// any deadline claimd keeps.
const maxTimerSlack = 10 * time.Millisecond

// timerSlackExecEnv marks the environment of the image serve executed to
// apply the slack, so that a kernel that did not keep it across execve is
// reported instead of executed again and again.
const timerSlackExecEnv = "CLAIMD_INTERNAL_TIMER_SLACK_EXEC"

// reexec replaces the process with a new image of claimd, given the same
// arguments and env; it returns only if that failed. main sets it: serve run
// by tests in their own process must not execute the test binary, and
// applies no slack.
var reexec func(env []string) error
