package claimd_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// The fencing-token pattern (clients/GUARD.md, "Stores without a shared
// transaction"): a write to a store that cannot join the effect fence's
// transaction (another database, a search index, a cache) carries the
// claim's fencing token and lands only where the stored token is lower. A
// holder that was taken over has a lower token than the holder that took
// over, so it can no longer overwrite that holder's write.

// paymentEventsSchema is the other store's table: one row per delivery,
// keyed by the claim's key, because fencing tokens order the holders of one
// delivery only (two deliveries' tokens do not compare).
const paymentEventsSchema = `CREATE TABLE IF NOT EXISTS payment_events (
	id            TEXT PRIMARY KEY,
	status        TEXT NOT NULL,
	fencing_token BIGINT NOT NULL
)`

// writeStatus sets the status of cl's delivery in db unless a holder with
// an equal or newer token wrote it already, and returns the rows it changed:
// 1 when it wrote, 0 when it was fenced off. The comparison and the write
// are one statement, so no holder slips in between them.
func writeStatus(ctx context.Context, db *sql.DB, d claimd.Dialect, cl claimd.Claim, status string) (int64, error) {
	res, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO payment_events (id, status, fencing_token) VALUES (%s, %s, %s)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, fencing_token = excluded.fencing_token
WHERE payment_events.fencing_token < excluded.fencing_token`, ph(d, 1), ph(d, 2), ph(d, 3)),
		cl.GetKey(), status, int64(cl.GetFencingToken()))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// readStatus reads the stored status and token of key; sql.ErrNoRows when
// no holder wrote it.
func readStatus(ctx context.Context, db *sql.DB, d claimd.Dialect, key string) (status string, token int64, err error) {
	err = db.QueryRowContext(ctx, "SELECT status, fencing_token FROM payment_events WHERE id = "+ph(d, 1), key).Scan(&status, &token)
	return status, token, err
}

// A holder that stalls past its lease (a long GC pause, a partition) wakes
// after another holder took the delivery over and wrote. Its late write to
// a store outside the fence's transaction is fenced off by its lower token.
func ExampleClient_Guard_fencingToken() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "claimd-fencing-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "projection.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if _, err := store.ExecContext(ctx, paymentEventsSchema); err != nil {
		fmt.Println(err)
		return
	}
	c, err := claimd.Dial(ctx, shared.Addr, claimd.WithLogger(quiet)) // the claimd this test binary started
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	req := claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: fmt.Sprintf("evt_fencing_example_%d", time.Now().UnixNano())}

	// Holder A claims the delivery with a 300ms lease, then stalls.
	reqA := req
	reqA.Lease, reqA.Start = 300*time.Millisecond, true
	a, err := c.Claim(ctx, reqA)
	if err != nil || !a.Acquired() {
		fmt.Println("A's claim:", a.GetOutcome(), err)
		return
	}

	// Holder B's delivery waits in claimd until A's lease ends, takes the
	// delivery over and writes.
	reqB := req
	reqB.Wait = 10 * time.Second
	out := c.Guard(ctx, reqB, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		n, err := writeStatus(ctx, store, claimd.DialectSQLite, cl, "succeeded")
		fmt.Printf("B (token %d, %v) wrote %d row\n", cl.GetFencingToken(), cl.GetReason(), n)
		return []byte("ok"), err
	})
	fmt.Println("B's delivery:", out.Disposition)

	// A wakes and writes what it had computed: fenced off.
	n, err := writeStatus(ctx, store, claimd.DialectSQLite, a, "processing")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("A (token %d) wrote %d rows\n", a.GetFencingToken(), n)

	status, token, err := readStatus(ctx, store, claimd.DialectSQLite, a.GetKey())
	fmt.Printf("stored: %s, token %d %v\n", status, token, err)
	// Output:
	// B (token 2, REASON_LEASE_EXPIRED) wrote 1 row
	// B's delivery: settled
	// A (token 1) wrote 0 rows
	// stored: succeeded, token 2 <nil>
}
