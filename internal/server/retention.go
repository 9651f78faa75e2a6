package server

import (
	"fmt"
	"time"
)

// RetentionConfig is what a janitor pass needs; serve runs passes in the
// background, claimd prune runs one. Each field is the flag of the same
// name (--grace, --batch, --retention).
type RetentionConfig struct {
	Grace     time.Duration
	Batch     int
	Retention time.Duration
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
	return nil
}
