package auditfile

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/claimd/claimd/internal/tiers"
)

// ReadKey reads the audit entries of k from the export at path, oldest
// first (at, then id: ListAudit's order), as ListAudit answers them. It
// reads the file a batch of rows at a time and keeps only k's.
func ReadKey(path string, k tiers.Key) ([]tiers.AuditEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auditfile: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auditfile: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("auditfile: %s is not a Parquet file: %w", path, err)
	}
	for _, col := range []string{"id", "at", "namespace", "provider", "key", "op", "state"} {
		if _, ok := pf.Schema().Lookup(col); !ok {
			return nil, fmt.Errorf("auditfile: %s is not an audit export: it has no column %q", path, col)
		}
	}
	r := parquet.NewGenericReader[Row](pf)
	defer r.Close()
	var (
		mine  []Row
		batch = make([]Row, writeBatch)
	)
	for {
		n, err := r.Read(batch)
		for i := range batch[:n] {
			if row := &batch[i]; row.Namespace == k.Namespace && row.Provider == k.Provider && row.Key == k.Key {
				mine = append(mine, row.clone())
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("auditfile: read %s: %w", path, err)
		}
	}
	slices.SortFunc(mine, func(a, b Row) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	entries := make([]tiers.AuditEntry, len(mine))
	for i := range mine {
		if entries[i], err = mine[i].Entry(); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// clone copies r out of the reader's buffers, which the next Read reuses.
func (r *Row) clone() Row {
	c := *r
	for _, s := range []*string{&c.Namespace, &c.Provider, &c.Key, &c.Op, &c.Outcome, &c.Reason, &c.State,
		&c.Holder, &c.AttemptID, &c.Principal, &c.Transport} {
		*s = strings.Clone(*s)
	}
	c.PayloadSHA256 = slices.Clone(c.PayloadSHA256)
	return c
}
