// Package migrations reads a durable tier's versioned schema changes from an
// embedded directory of NNNN_name.sql files. Applying them is the backend's
// job (each in its own transaction, under its own lock); this package only
// guarantees the order: versions run 1, 2, 3 … without gaps or repeats, so
// the highest version applied to a database says exactly which files it has
// seen.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string // the file name without .sql, e.g. 0001_claims
	SQL     string
}

// Load returns the migrations in dir of fsys, in version order.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := path.Base(n)
		prefix, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		body, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(base, ".sql"), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (no gaps or repeats)", m.Name, m.Version, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return ms, nil
}

// Result is what one migration run did to a database, for the operator
// who ran `claimd migrate`.
type Result struct {
	// Applied are the migrations this run applied, in order; empty when the
	// database was up to date.
	Applied []Migration
	// Adopted are versions an earlier claimd recorded under the table name
	// schema_migrations, carried over to the current name: applied before,
	// not now.
	Adopted []int
	// Version is the database's schema version after the run.
	Version int
}

// String says what the run did: "applied 0001_claims, 0002_audit; now at
// version 2", or "up to date at version 2".
func (r Result) String() string {
	var b strings.Builder
	if len(r.Adopted) > 0 {
		vs := make([]string, len(r.Adopted))
		for i, v := range r.Adopted {
			vs[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, "took over versions %s recorded in schema_migrations by claimd 0.1; ", strings.Join(vs, ", "))
	}
	if len(r.Applied) == 0 {
		fmt.Fprintf(&b, "up to date at version %d", r.Version)
		return b.String()
	}
	names := make([]string, len(r.Applied))
	for i, m := range r.Applied {
		names[i] = m.Name
	}
	fmt.Fprintf(&b, "applied %s; now at version %d", strings.Join(names, ", "), r.Version)
	return b.String()
}
