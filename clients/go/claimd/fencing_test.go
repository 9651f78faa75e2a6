package claimd_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc"

	"github.com/claimd/claimd/clients/go/claimd"
)

// TestFencingTokenStore: two guarded holders of one delivery write to a
// store outside any effect's transaction with writeStatus (the
// fencing-token pattern of example_fencing_test.go). Holder A's renewals
// are cut off, so its lease ends while its handler runs; B's delivery waits
// in claimd for that and takes over. Whichever order their writes reach
// the store, the stored row is B's: A's write after the takeover changes
// no row, and B's write after A's overwrites it.
func TestFencingTokenStore(t *testing.T) {
	t.Parallel()
	for _, d := range effectDialects {
		for _, tt := range []struct {
			desc        string
			aFirst      bool   // A writes before B takes over (else after B wrote)
			aRows       int64  // rows A's write changed
			bRows       int64  // rows B's write changed
			afterA      string // the stored status right after A's write
			afterAToken int64  // and its token
		}{
			{desc: "zombie writes after the takeover", aRows: 0, bRows: 1, afterA: "B", afterAToken: 2},
			{desc: "taker overwrites the first holder", aFirst: true, aRows: 1, bRows: 1, afterA: "A", afterAToken: 1},
		} {
			t.Run(string(d)+"/"+tt.desc, func(t *testing.T) {
				t.Parallel()
				ctx := ctxT(t)
				store := openEffectDB(t, d)
				if _, err := store.ExecContext(ctx, paymentEventsSchema); err != nil {
					t.Fatal(err)
				}
				gate := &renewGate{}
				gate.closed.Store(true)
				a := dial(t, shared.Addr, claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(gate.intercept)))
				b := dial(t, shared.Addr)
				id := eventID(t)

				// write is what one holder's writeStatus did, and the stored
				// row right after it.
				type write struct {
					Token       int64 // the holder's fencing token
					Rows        int64 // rows the write changed
					Status      string
					StoredToken int64
					err         error
				}
				do := func(ctx context.Context, cl claimd.Claim, status string) write {
					w := write{Token: int64(cl.GetFencingToken())}
					if w.Rows, w.err = writeStatus(ctx, store, d, cl, status); w.err == nil {
						w.Status, w.StoredToken, w.err = readStatus(ctx, store, d, cl.GetKey())
					}
					return w
				}

				var wroteA write
				running := make(chan struct{}) // A's handler holds the delivery
				bDone := make(chan struct{})   // B settled: A may go on
				aDone := make(chan claimd.Outcome, 1)
				go func() {
					req := stripe(id)
					req.Lease = 300 * time.Millisecond
					aDone <- a.Guard(ctx, req, func(fnCtx context.Context, cl claimd.Claim) ([]byte, error) {
						if tt.aFirst {
							wroteA = do(fnCtx, cl, "A")
						}
						close(running)
						select {
						case <-bDone:
						case <-ctx.Done():
						}
						if !tt.aFirst {
							wroteA = do(fnCtx, cl, "A")
						}
						return []byte("A"), wroteA.err
					})
				}()
				select {
				case <-running:
				case out := <-aDone:
					t.Fatalf("A's Guard ended before its handler ran: %v (%v)", out.Disposition, out.Err)
				}

				// claimd answers B's claim once A's lease has ended by its
				// own clock: the wait is the takeover, not a sleep.
				var wroteB write
				req := stripe(id)
				req.Wait = 10 * time.Second
				outB := b.Guard(ctx, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
					wroteB = do(ctx, cl, "B")
					return []byte("B"), wroteB.err
				})
				close(bDone)
				outA := <-aDone

				if outB.Status != http.StatusOK || outB.Disposition != claimd.Settled || !outB.Claim.TakenOver() {
					t.Fatalf("B's Guard = %d %v reason %v (%v), want 200 settled after LEASE_EXPIRED", outB.Status, outB.Disposition, outB.Claim.GetReason(), outB.Err)
				}
				// A's settle is stale: the delivery is B's.
				if outA.Status != http.StatusConflict || outA.Disposition != claimd.Superseded {
					t.Errorf("A's Guard = %d %v (%v), want 409 superseded", outA.Status, outA.Disposition, outA.Err)
				}
				for _, w := range []struct {
					holder    string
					want, got write
				}{
					{"B", write{Token: 2, Rows: tt.bRows, Status: "B", StoredToken: 2}, wroteB},
					{"A", write{Token: 1, Rows: tt.aRows, Status: tt.afterA, StoredToken: tt.afterAToken}, wroteA},
				} {
					if w.got.err != nil {
						t.Errorf("%s's write: %v", w.holder, w.got.err)
						continue
					}
					if diff := cmp.Diff(w.want, w.got, cmpopts.IgnoreUnexported(write{})); diff != "" {
						t.Errorf("%s's write (-want +got):\n%s", w.holder, diff)
					}
				}
				if status, token, err := readStatus(ctx, store, d, id); err != nil || status != "B" || token != 2 {
					t.Errorf("stored row = %q token %d (%v), want B's: \"B\" token 2", status, token, err)
				}
			})
		}
	}
}
