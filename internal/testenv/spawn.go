package testenv

import (
	"os/exec"
	"runtime"
	"sync"
)

// spawnCall is one server start for the spawner's thread.
type spawnCall struct {
	cmd  *exec.Cmd
	done chan error
}

// spawner is the channel of a goroutine locked to one OS thread for the
// life of the process, which forks every server: the kernel sends a
// server's Pdeathsig when the thread that forked it exits, not when the
// process does, and Go ends a thread whose goroutine returns while locked
// to it (cmd/claimd's tests that enter a network namespace do so on
// purpose). A shared PostgreSQL forked from a thread that such a test later
// took died with it, and every test after it met "connection refused"
// (golang/go#27505).
var spawner = sync.OnceValue(func() chan<- spawnCall {
	calls := make(chan spawnCall)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for c := range calls {
			c.done <- c.cmd.Start()
		}
	}()
	return calls
})

// startFromSpawner is cmd.Start forked from the spawner's thread.
func startFromSpawner(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawner() <- spawnCall{cmd: cmd, done: done}
	return <-done
}
