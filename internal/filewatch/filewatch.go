// Package filewatch is how claimd notices that a file it was started with
// has been replaced: TLS certificates, keys and CRLs (rotated by
// cert-manager, Vault agent or kubelet) and the auth file (edited, or the
// symlink swap of a Kubernetes ConfigMap). It is the one mechanism for all
// of them, with two triggers:
//
//   - Poll, called on the request path (a TLS handshake, an authentication):
//     at most once per interval of an injected clock it reads the files,
//     and hands them to the caller's load only when their bytes changed
//     since the last contents it handed over. A caller never waits for
//     another's check (it then goes on with what is in force).
//   - Load, for SIGHUP and start-up: read and hand over now, changed or not.
//
// Polling was chosen over an fsnotify watch: a watch on a file misses the
// symlink swap of a Kubernetes secret volume (the watched inode never
// changes), a watch on the directory sees every rename and chmod and still
// has to re-read to know what changed, and either needs a goroutine and
// tests that wait for asynchronous events. Reading a few small files at
// most every few seconds costs nothing measurable, works with any way of
// replacing them, and is tested deterministically with a fake clock.
//
// A replacement that does not load (a certificate with the old key half-way
// through a rotation, a truncated file, a broken auth file) is reported once
// per distinct content: Poll hands the same broken bytes over only once, so
// a file left broken does not flood the log.
package filewatch

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"sync"
	"time"

	"github.com/claimd/claimd/internal/clock"
)

// DefaultInterval is how often, at most, Poll re-reads the files. A
// replacement is seen within it; certificate managers renew long before
// expiry and an operator editing the auth file waits seconds, so seconds
// are plenty.
const DefaultInterval = 10 * time.Second

// Files is a set of files read together (a certificate and its key are
// replaced as one). An empty path stands for a file not configured; it
// reads as nil.
type Files struct {
	paths    []string
	interval time.Duration
	clk      clock.Clock

	mu   sync.Mutex
	next time.Time         // when Poll may read again
	seen [sha256.Size]byte // digest of what was last handed over (or failed to read)
}

// New watches paths, checking at most once per interval of clk.
func New(clk clock.Clock, interval time.Duration, paths ...string) *Files {
	return &Files{paths: paths, interval: interval, clk: clk, next: clk.Now().Add(interval)}
}

// Load reads the files now and hands their contents, in the order of the
// paths, to load, whatever they hold; it returns load's error or the read
// error. Start-up and SIGHUP use it.
func (f *Files) Load(load func(contents [][]byte) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = f.clk.Now().Add(f.interval)
	contents, err := f.read()
	f.seen = digest(contents, err)
	if err != nil {
		return err
	}
	return load(contents)
}

// Poll reads the files when the interval has passed since the last read,
// and hands them to load when their bytes differ from the last contents
// handed over (or that failed to read). It returns whether load ran (or a
// new read error was found) and what failed. When another caller is
// checking, Poll returns at once without reading.
func (f *Files) Poll(load func(contents [][]byte) error) (bool, error) {
	if !f.mu.TryLock() {
		return false, nil
	}
	defer f.mu.Unlock()
	now := f.clk.Now()
	if now.Before(f.next) {
		return false, nil
	}
	f.next = now.Add(f.interval)
	contents, err := f.read()
	sum := digest(contents, err)
	if sum == f.seen {
		return false, nil
	}
	f.seen = sum
	if err != nil {
		return true, err
	}
	return true, load(contents)
}

// read reads every file; the first error stops it.
func (f *Files) read() ([][]byte, error) {
	contents := make([][]byte, len(f.paths))
	for i, p := range f.paths {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		contents[i] = b
	}
	return contents, nil
}

// digest identifies what a read found: every file's bytes, length-prefixed
// so that no two sets share it, or the error.
func digest(contents [][]byte, err error) [sha256.Size]byte {
	h := sha256.New()
	if err != nil {
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, c := range contents {
		h.Write(binary.AppendUvarint(nil, uint64(len(c))))
		h.Write(c)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
