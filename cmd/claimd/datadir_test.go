package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataDirOneProcess: a second claimd on a data directory that a
// running claimd serves from is refused at start, and the refusal names
// the holder's PID; once the first has stopped, the directory is free
// again, whatever its lock file still says.
func TestDataDirOneProcess(t *testing.T) {
	dataDir := t.TempDir()
	first := start(t, "--data-dir", dataDir)
	pid := first.cmd.Process.Pid
	lockFile := filepath.Join(dataDir, "claimd.lock") // internal/server/datadir.go

	tests := []struct {
		desc string
		args []string
	}{
		{"a second serve", []string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", dataDir}},
		{"migrate", []string{"migrate", "--data-dir", dataDir}},
		{"prune", []string{"prune", "--data-dir", dataDir}},
	}
	want := fmt.Sprintf("--data-dir %s is in use by another claimd (pid %d, which holds the lock on %s)", dataDir, pid, lockFile)
	for _, tc := range tests {
		r := runEnv(t, nil, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: claimd %v while pid %d serves = exit %d, stderr %q; want exit 1 and %q", tc.desc, tc.args, pid, r.code, r.stderr, want)
		}
	}

	first.stop(t)
	if b, err := os.ReadFile(lockFile); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(pid) {
		t.Errorf("lock file after the holder stopped = %q, %v; want its PID %d left behind", b, err, pid)
	}
	second := start(t, "--data-dir", dataDir)
	second.stop(t)
}

// TestDataDirLockKilledHolder: the lock is the kernel's, so a holder that
// is killed, with no chance to clean up, leaves the directory free.
func TestDataDirLockKilledHolder(t *testing.T) {
	dataDir := t.TempDir()
	first := start(t, "--data-dir", dataDir)
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	second := start(t, "--data-dir", dataDir)
	second.stop(t)
}
