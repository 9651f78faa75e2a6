package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dataDirLockName is the lock file in --data-dir. The lock is flock(2) on
// it, not the file's existence: the kernel drops it when its holder exits,
// however it exits, so a file left behind by a killed claimd locks nothing.
const dataDirLockName = "claimd.lock"

// dataDirLock is one process's hold on a data directory: the embedded
// tiers answer from an in-process cache in front of the SQLite file, so a
// second process on the same directory would answer from a cache that the
// first one's writes never reach (a stale IN_PROGRESS, a second
// ACQUIRED). One process at a time: serve, migrate or prune.
type dataDirLock struct{ f *os.File }

// lockDataDir takes dir's lock, without waiting, and writes this process's
// PID into the lock file for the next one to name. When another process
// holds it, the error names that process's PID and the lock file.
func lockDataDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("--data-dir %s: lock %s: %w", dir, path, err)
		}
		return nil, fmt.Errorf("--data-dir %s is in use by another claimd (%s, which holds the lock on %s): "+
			"its embedded tiers belong to one process at a time; stop that one, or give this one its own --data-dir",
			dir, holder(path), path)
	}
	// The holder writes its PID only once it holds the lock, so a PID in
	// the file of a held lock is the holder's (or, for the instant between
	// the two, the previous holder's).
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--data-dir %s: write %s: %w", dir, path, err)
	}
	return &dataDirLock{f: f}, nil
}

// holder names the process that holds the lock on path, as it wrote
// itself into the file.
func holder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "pid unknown: " + err.Error()
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return "pid not yet written" // it took the lock a moment ago
	}
	return "pid " + strconv.Itoa(pid)
}

// unlock releases the lock; the file stays, holding the last PID.
func (l *dataDirLock) unlock() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}
