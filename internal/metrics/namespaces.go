package metrics

import "sync"

// DefaultMaxNamespaces is how many namespaces keep their own label when no
// auth file names them.
const DefaultMaxNamespaces = 100

// OtherNamespace is the namespace label of the namespaces past the bound.
const OtherNamespace = "other"

// firstSeen labels namespaces by their name until max distinct ones have
// been seen, and every later one "other". Without an auth file callers
// choose namespaces freely, and each would otherwise add series to
// /metrics for as long as the process runs.
type firstSeen struct {
	max  int
	seen sync.Map // namespace → struct{}; read without the lock on the hot path
	mu   sync.Mutex
	n    int // entries of seen, guarded by mu
}

func (f *firstSeen) label(ns string) string {
	if _, ok := f.seen.Load(ns); ok {
		return ns
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.seen.Load(ns); ok {
		return ns
	}
	if f.n >= f.max {
		return OtherNamespace
	}
	f.seen.Store(ns, struct{}{})
	f.n++
	return ns
}
