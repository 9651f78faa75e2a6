package auth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/filewatch"
)

// Options configures Load. Zero values mean the defaults.
type Options struct {
	// Registerer receives the auth metrics (claimd_auth_*). Default: none.
	Registerer prometheus.Registerer
	// Logger receives refusals and reloads. Default slog.Default().
	Logger *slog.Logger
	// Clock feeds the rate limiters, decides when a token has expired and
	// when the file is due for another check. Default clock.Real.
	Clock clock.Clock
	// CheckInterval is the least time between two checks of the file on
	// the request path. Default filewatch.DefaultInterval.
	CheckInterval time.Duration
	// Identity is the one part of a client certificate that names its
	// principal (--tls-identity). Default IdentityURI.
	Identity IdentityKind
	// Reloaded, when set, is called after every reload attempt with its
	// outcome (nil: the new file is in force). Tests wait on it.
	Reloaded func(error)
}

// Authenticator authenticates and authorizes gRPC calls against an auth
// file, which it re-reads when it changed (checked at most once per
// CheckInterval, on the request path) and on Reload (SIGHUP): the way
// claimd notices every replaced file (internal/filewatch). It is safe for
// concurrent use.
type Authenticator struct {
	path  string
	opts  Options
	rules map[string]rule
	met   *authMetrics

	cur atomic.Pointer[state]
	// files reads the auth file, one reload at a time (so that limiters
	// carry over in order), reporting a broken edit once.
	files *filewatch.Files

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
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = filewatch.DefaultInterval
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
		files:     filewatch.New(opts.Clock, opts.CheckInterval, path),
	}
	var st *state
	if err := a.files.Load(func(c [][]byte) (err error) {
		st, err = a.build(c[0], nil)
		return err
	}); err != nil {
		return nil, readError(err)
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

// Reload re-reads the auth file now, changed or not (SIGHUP). A file that
// does not load leaves the previous one in force; the error says why (every
// broken rule, with its line) and is logged.
func (a *Authenticator) Reload() error {
	err := readError(a.files.Load(a.swap))
	a.reported(err)
	return err
}

// current returns the state in force, after checking the file when it is
// due. A call never waits for another's check.
func (a *Authenticator) current() *state {
	if ran, err := a.files.Poll(a.swap); ran {
		if errors.Is(err, fs.ErrNotExist) {
			// Mid-replace (an editor moved it aside), or deleted: its
			// return will be seen; until then the file in force stays.
			a.opts.Logger.Warn("auth file is gone; the one loaded stays in force", "file", a.path)
		} else {
			a.reported(readError(err))
		}
	}
	return a.cur.Load()
}

// swap builds the state of the file's new contents and puts it in force,
// carrying the rate limiters over.
func (a *Authenticator) swap(c [][]byte) error {
	st, err := a.build(c[0], a.cur.Load())
	if err != nil {
		return err
	}
	a.cur.Store(st)
	a.met.loaded(st)
	a.warnUnmatchable(st)
	a.opts.Logger.Info("auth file reloaded", "file", a.path, "principals", len(st.principals))
	return nil
}

// reported counts and logs the outcome of a reload, and tells the tests.
func (a *Authenticator) reported(err error) {
	if err != nil {
		a.met.reloadFailed()
		a.opts.Logger.Error("auth file reload failed; the previous one stays in force", "file", a.path, "err", err)
	} else {
		a.met.reloadDone()
	}
	if a.opts.Reloaded != nil {
		a.opts.Reloaded(err)
	}
}

// readError names a read error as the auth file's; a parse error already
// names the file and line.
func readError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("auth file: %w", err)
	}
	return err
}

// NamespaceLabel returns the metric label of a (validated) namespace: the
// namespace itself when the auth file names it, the file's pattern that
// matches it ("payouts-*"), or "other". The auth file bounds the label's
// values; internal/metrics takes this as its NamespaceLabel. It reads the
// file in force without checking it again: the call it labels was
// authenticated a moment before, and that check is enough.
func (a *Authenticator) NamespaceLabel(ns string) string {
	return a.cur.Load().label(ns)
}
