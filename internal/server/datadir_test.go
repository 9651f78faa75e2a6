package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockDataDirInProcess: flock locks belong to an open file, so a
// second lock in one process conflicts too, and unlock frees it.
func TestLockDataDirInProcess(t *testing.T) {
	dir := t.TempDir()
	a, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(pid %d, which holds the lock on %s)", os.Getpid(), filepath.Join(dir, dataDirLockName))
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("lockDataDir(%q) while held = %v, want an error naming %q", dir, err, want)
	}
	if err := a.unlock(); err != nil {
		t.Fatal(err)
	}
	b, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lockDataDir(%q) after unlock = %v", dir, err)
	}
	b.unlock()
}
