package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/claimd/claimd/internal/clock"
)

// Options configures Load. Zero values mean the defaults.
type Options struct {
	// Registerer receives the auth metrics (claimd_auth_*). Default: none.
	Registerer prometheus.Registerer
	// Logger receives refusals and reloads. Default slog.Default().
	Logger *slog.Logger
	// Clock feeds the rate limiters and decides when a token has expired.
	// Default clock.Real.
	Clock clock.Clock
	// Identity is the one part of a client certificate that names its
	// principal (--tls-identity). Default IdentityURI.
	Identity IdentityKind
	// Reloaded, when set, is called after every reload attempt with its
	// outcome (nil: the new file is in force). Tests wait on it.
	Reloaded func(error)
}

// Authenticator authenticates and authorizes gRPC calls against an auth
// file, which it re-reads on Reload and while Watch runs. It is safe for
// concurrent use.
type Authenticator struct {
	path  string
	opts  Options
	rules map[string]rule
	met   *authMetrics

	cur      atomic.Pointer[state]
	reloadMu sync.Mutex // one reload at a time, so limiters carry over in order
	// failedSum is the hash of the last file that failed to load (guarded
	// by reloadMu): the several events of one edit report it once.
	failedSum [sha256.Size]byte

	// unauthLog bounds the log lines of unauthenticated calls: anybody
	// who can reach the port can make them.
	unauthLog  *rate.Limiter
	suppressed atomic.Int64
}

// Load reads the auth file at path and returns an Authenticator enforcing
// it. A file that does not load is an error: a server must not start with
// authentication it cannot enforce.
func Load(path string, opts Options) (*Authenticator, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Identity == "" {
		opts.Identity = IdentityURI
	}
	if _, err := ParseIdentityKind(string(opts.Identity)); err != nil {
		return nil, fmt.Errorf("auth: identity kind: %w", err)
	}
	a := &Authenticator{
		path:      path,
		opts:      opts,
		rules:     methodRules(),
		met:       newAuthMetrics(),
		unauthLog: rate.NewLimiter(10, 20),
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	st, err := a.build(data, nil)
	if err != nil {
		return nil, err
	}
	a.cur.Store(st)
	if opts.Registerer != nil {
		if err := a.met.register(opts.Registerer); err != nil {
			return nil, err
		}
	}
	a.met.loaded(st)
	a.warnUnmatchable(st)
	return a, nil
}

// warnUnmatchable says which identities of the file grant nothing under
// the configured kind: a file written for another --tls-identity.
func (a *Authenticator) warnUnmatchable(st *state) {
	if ids := st.unmatchable(); len(ids) > 0 {
		a.opts.Logger.Warn("auth file lists certificate identities that --tls-identity never reads; they admit nobody",
			"file", a.path, "tls_identity", string(st.kind), "identities", ids)
	}
}

// build parses the file's bytes into a new state; prev supplies the
// limiters to keep.
func (a *Authenticator) build(data []byte, prev *state) (*state, error) {
	cfg, err := Parse(a.path, data)
	if err != nil {
		return nil, err
	}
	return newState(cfg, sha256.Sum256(data), prev, a.opts.Identity, a.opts.Clock), nil
}

// Reload re-reads the auth file. A file that does not load leaves the
// previous one in force; the error says why (every broken rule, with its
// line) and is logged.
func (a *Authenticator) Reload() error {
	return a.reload(false)
}

// reload re-reads the file; onlyChanged skips a file whose bytes are those
// in force or those that last failed (the several events of one edit).
func (a *Authenticator) reload(onlyChanged bool) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	prev := a.cur.Load()
	data, err := os.ReadFile(a.path)
	var st *state
	if err != nil && onlyChanged && errors.Is(err, fs.ErrNotExist) {
		// Mid-replace (an editor moved it aside), or deleted: its return
		// will be seen; until then the file in force stays.
		a.opts.Logger.Warn("auth file is gone; the one loaded stays in force", "file", a.path)
		return nil
	}
	if err != nil {
		err = fmt.Errorf("auth file: %w", err)
	} else {
		sum := sha256.Sum256(data)
		if onlyChanged && (sum == prev.sum || sum == a.failedSum) {
			return nil
		}
		if st, err = a.build(data, prev); err != nil {
			a.failedSum = sum
		}
	}
	if err != nil {
		a.met.reloadFailed()
		a.opts.Logger.Error("auth file reload failed; the previous one stays in force", "file", a.path, "err", err)
	} else {
		a.cur.Store(st)
		a.met.loaded(st)
		a.met.reloadDone()
		a.warnUnmatchable(st)
		a.opts.Logger.Info("auth file reloaded", "file", a.path, "principals", len(st.principals))
	}
	if a.opts.Reloaded != nil {
		a.opts.Reloaded(err)
	}
	return err
}

// Watch reloads the auth file whenever a value arrives on hup (the caller
// subscribes it to SIGHUP) and whenever the file's directory reports a
// change that alters the file (an edit, a rename over it, the symlink swap
// of a Kubernetes ConfigMap). It returns when ctx ends. When the directory
// cannot be watched, it says so in the log and reloads on hup only.
func (a *Authenticator) Watch(ctx context.Context, hup <-chan os.Signal) {
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if w, err := a.watchDir(); err != nil {
		a.opts.Logger.Warn("cannot watch the auth file for changes; it reloads on SIGHUP only", "file", a.path, "err", err)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	base := filepath.Base(a.path)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			a.Reload()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if name := filepath.Base(ev.Name); name == base || strings.HasPrefix(name, "..") {
				a.reload(true)
			}
		case err, ok := <-errs:
			switch {
			case !ok:
				errs = nil
			case errors.Is(err, fsnotify.ErrEventOverflow):
				a.reload(true) // events were lost; one of them may have been ours
			default:
				a.opts.Logger.Warn("watching the auth file", "file", a.path, "err", err)
			}
		}
	}
}

// watchDir watches the auth file's directory, not the file: editors and
// ConfigMaps replace the file, and a watch on the old inode would go quiet.
func (a *Authenticator) watchDir() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(a.path)); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// NamespaceLabel returns the metric label of a (validated) namespace: the
// namespace itself when the auth file names it, the file's pattern that
// matches it ("payouts-*"), or "other". The auth file bounds the label's
// values; internal/metrics takes this as its NamespaceLabel.
func (a *Authenticator) NamespaceLabel(ns string) string {
	return a.cur.Load().label(ns)
}
