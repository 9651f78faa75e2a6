package postgres

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

var dbgNanos, dbgStmts, dbgRows atomic.Int64

func init() {
	if os.Getenv("CLAIMD_BATCH_DEBUG") == "" {
		return
	}
	go func() {
		for range time.Tick(time.Second) {
			s, r, n := dbgStmts.Swap(0), dbgRows.Swap(0), dbgNanos.Swap(0)
			if s > 0 {
				fmt.Fprintf(os.Stderr, "batch: %d stmts, %.1f rows/stmt, %.2fms/stmt\n", s, float64(r)/float64(s), float64(n)/float64(s)/1e6)
			}
		}
	}()
}
