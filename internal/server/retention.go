package server

import (
	"fmt"
	"os"
	"time"
)

// RetentionConfig is what a janitor pass needs; serve runs passes in the
// background, claimd prune runs one. Each field is the flag of the same
// name (--grace, --batch, --retention, --audit-export-dir).
type RetentionConfig struct {
	Grace     time.Duration
	Batch     int
	Retention time.Duration
	// AuditExportDir, when set, is where each audit partition retention
	// drops is exported first, as <partition>.parquet (PostgreSQL only).
	AuditExportDir string
}

// Check refuses settings no pass could run with.
func (r *RetentionConfig) Check() error {
	switch {
	case r.Grace < 0:
		return fmt.Errorf("%w: --grace %v is negative", ErrUsage, r.Grace)
	case r.Batch <= 0:
		return fmt.Errorf("%w: --batch %d must be positive", ErrUsage, r.Batch)
	case r.Retention <= 0:
		return fmt.Errorf("%w: --retention %v must be positive", ErrUsage, r.Retention)
	}
	if r.AuditExportDir != "" {
		// The operator's directory, not made here: a typo must not export
		// a year of audit into a directory no backup covers.
		if st, err := os.Stat(r.AuditExportDir); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: --audit-export-dir %q is not an existing directory", ErrUsage, r.AuditExportDir)
		}
	}
	return nil
}
