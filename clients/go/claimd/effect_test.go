package claimd_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/clients/go/claimd"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// What the guard scenarios cannot show about Effect: misuse, pruning, and
// two holders' effects racing on one key in PostgreSQL.

const testLedger = "CREATE TABLE IF NOT EXISTS effect_test_ledger (key TEXT NOT NULL, writer TEXT NOT NULL)"

// writeLedger is an EffectFunc that appends (key, writer) and stores result.
func writeLedger(d claimd.Dialect, key, writer string, result []byte) claimd.EffectFunc {
	return func(ctx context.Context, tx claimd.EffectTx, fx *claimd.Fx) error {
		_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO effect_test_ledger (key, writer) VALUES (%s, %s)", ph(d, 1), ph(d, 2)), key, writer)
		fx.Result = result
		return err
	}
}

// ledgerWriters lists the writers of key's ledger rows.
func ledgerWriters(t *testing.T, db *sql.DB, d claimd.Dialect, key string) []string {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf("SELECT writer FROM effect_test_ledger WHERE key = %s", ph(d, 1)), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEffectKeyIsAMethodToo(t *testing.T) {
	c := claimd.Claim{ClaimResponse: &pb.ClaimResponse{Key: "evt_1PXyz"}, Namespace: "billing", Provider: "stripe"}
	if got, want := c.EffectKey("charge"), claimd.EffectKey(c, "charge"); got != want || len(got) != 39 {
		t.Errorf("Claim.EffectKey(charge) = %q, EffectKey = %q; want equal, 39 characters", got, want)
	}
	if claimd.EffectKey(c, "charge") == claimd.EffectKey(c, "refund") {
		t.Error("EffectKey is the same for two steps")
	}
}

func TestEffectOutsideGuard(t *testing.T) {
	t.Parallel()
	for _, d := range effectDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := openEffectDB(t, d)
			called := false
			fn := func(context.Context, claimd.EffectTx, *claimd.Fx) error { called = true; return nil }
			if fx, err := claimd.Effect(ctxT(t), db, fn); !errors.Is(err, claimd.ErrEffectOutsideGuard) || fx != nil || called {
				t.Errorf("Effect(background) = %v, %v (fn called %v); want ErrEffectOutsideGuard, fn not called", fx, err, called)
			}

			// A context Guard handed to fn stops opening effects once fn
			// returned: the claim may be someone else's by then.
			c := dial(t, shared.Addr)
			var leaked context.Context
			out := c.Guard(ctxT(t), stripe(eventID(t)), func(ctx context.Context, _ claimd.Claim) ([]byte, error) {
				leaked = ctx
				return nil, nil
			})
			if out.Disposition != claimd.Settled {
				t.Fatalf("Guard = %v (%v), want settled", out.Disposition, out.Err)
			}
			if _, err := claimd.Effect(context.WithoutCancel(leaked), db, fn); !errors.Is(err, claimd.ErrEffectOutsideGuard) || called {
				t.Errorf("Effect after fn returned = %v (fn called %v); want ErrEffectOutsideGuard", err, called)
			}
		})
	}
}

func TestEffectTwiceInOneDelivery(t *testing.T) {
	t.Parallel()
	for _, d := range effectDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db := openEffectDB(t, d)
			if _, err := db.ExecContext(ctx, testLedger); err != nil {
				t.Fatal(err)
			}
			c := dial(t, shared.Addr)
			id := eventID(t)
			var second error
			out := c.Guard(ctx, stripe(id), func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
				fx, err := claimd.Effect(ctx, db, writeLedger(d, id, "first", []byte("one")))
				if err != nil {
					return nil, err
				}
				_, second = claimd.Effect(ctx, db, writeLedger(d, id, "second", []byte("two")))
				return fx.Result, nil
			})
			if !errors.Is(second, claimd.ErrEffectTwice) {
				t.Errorf("second Effect = %v, want ErrEffectTwice", second)
			}
			if out.Status != http.StatusOK || string(out.Body) != "one" || out.Effect == nil || out.Effect.Done {
				t.Errorf("Guard = %d %q (effect %+v, err %v), want 200 \"one\" with its effect not done", out.Status, out.Body, out.Effect, out.Err)
			}
			if diff := cmp.Diff([]string{"first"}, ledgerWriters(t, db, d, id)); diff != "" {
				t.Errorf("ledger writers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPruneEffects: only fences created before the cutoff go, and the
// default created_at compares with a cutoff in both dialects.
func TestPruneEffects(t *testing.T) {
	t.Parallel()
	for _, d := range effectDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db := openEffectDB(t, d)
			// On an empty database: it creates the table, and deletes nothing.
			if n, err := claimd.PruneEffects(ctx, db, time.Now()); err != nil || n != 0 {
				t.Fatalf("PruneEffects on a new database = %d, %v; want 0, nil", n, err)
			}
			now := time.Now()
			old := now.Add(-48 * time.Hour)
			var oldAt any = old
			if d == claimd.DialectSQLite {
				oldAt = old.UTC().Format("2006-01-02T15:04:05.000Z")
			}
			insert := fmt.Sprintf("INSERT INTO claimd_effects (namespace, provider, key, fencing_token, created_at) VALUES ('n', 'p', %s, 1, %s)", ph(d, 1), ph(d, 2))
			if _, err := db.ExecContext(ctx, insert, "old", oldAt); err != nil {
				t.Fatal(err)
			}
			// created_at by the table's default: now.
			if _, err := db.ExecContext(ctx, "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES ('n', 'p', 'new', 2)"); err != nil {
				t.Fatal(err)
			}
			keys := func() []string {
				rows, err := db.QueryContext(ctx, "SELECT key FROM claimd_effects ORDER BY key")
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var out []string
				for rows.Next() {
					var k string
					if err := rows.Scan(&k); err != nil {
						t.Fatal(err)
					}
					out = append(out, k)
				}
				return out
			}
			for _, step := range []struct {
				desc   string
				before time.Time
				want   int64
				left   []string
			}{
				{"a day ago", now.Add(-24 * time.Hour), 1, []string{"new"}},
				{"a day ago, again", now.Add(-24 * time.Hour), 0, []string{"new"}},
				{"in an hour", now.Add(time.Hour), 1, nil},
			} {
				n, err := claimd.PruneEffects(ctx, db, step.before)
				if err != nil || n != step.want {
					t.Errorf("%s: PruneEffects = %d, %v; want %d", step.desc, n, err, step.want)
				}
				if diff := cmp.Diff(step.left, keys()); diff != "" {
					t.Errorf("%s: fences left (-want +got):\n%s", step.desc, diff)
				}
			}
		})
	}
}

func TestEffectDialectOption(t *testing.T) {
	t.Parallel()
	db := openEffectDB(t, claimd.DialectSQLite)
	if _, err := claimd.PruneEffects(ctxT(t), db, time.Now(), claimd.EffectDialect(claimd.DialectMySQL)); err == nil {
		t.Error("PruneEffects with dialect mysql = nil error; want it refused (no guard speaks MySQL)")
	}
	if _, err := claimd.PruneEffects(ctxT(t), db, time.Now(), claimd.EffectDialect(claimd.DialectSQLite)); err != nil {
		t.Errorf("PruneEffects with dialect sqlite = %v", err)
	}
}

// TestEffectHoldersRacePostgres: a zombie holder A (its renewals fail, so
// its lease lapses while its handler runs) and the holder B that took the
// key over run their effects on one key at once. A's transaction holds the
// fence row; B's insert waits for it. Whichever way A's transaction ends,
// exactly one fence and one ledger row are committed, and the event is
// settled with that effect's result.
func TestEffectHoldersRacePostgres(t *testing.T) {
	t.Parallel()
	const d = claimd.DialectPostgres
	for _, tt := range []struct {
		desc     string
		aFails   bool   // A's effect function fails after B is waiting
		writer   string // the ledger row's writer
		token    uint64 // the fence's token
		result   string // the fence's and the record's result
		bDone    bool   // B's effect found A's fence
		bRecover bool   // B's settle carried effect_recovered
	}{
		{desc: "A commits first", writer: "A", token: 1, result: "from A", bDone: true, bRecover: true},
		{desc: "A rolls back", aFails: true, writer: "B", token: 2, result: "from B"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			db := openEffectDB(t, d)
			if _, err := db.ExecContext(ctx, testLedger); err != nil {
				t.Fatal(err)
			}
			id := eventID(t)

			// A's client fails every renewal without reaching claimd, as a
			// partitioned or paused holder's would.
			var bRecovered atomic.Bool
			failRenew := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if _, ok := req.(*pb.RenewRequest); ok {
					return status.Error(codes.Unavailable, "renewals cut off by the test")
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})
			spyRecovered := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if r, ok := req.(*pb.TransitionRequest); ok && r.GetEffectRecovered() {
					bRecovered.Store(true)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})
			a := dial(t, shared.Addr, claimd.WithDialOptions(failRenew))
			b := dial(t, shared.Addr, claimd.WithDialOptions(spyRecovered))

			inEffect := make(chan struct{}) // A holds the fence row
			finishA := make(chan struct{})  // B is waiting on it
			aDone := make(chan claimd.Outcome, 1)
			go func() {
				req := stripe(id)
				req.Lease = 300 * time.Millisecond
				aDone <- a.Guard(ctx, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
					fx, err := claimd.Effect(ctx, db, func(ctx context.Context, tx claimd.EffectTx, fx *claimd.Fx) error {
						if err := writeLedger(d, id, "A", []byte("from A"))(ctx, tx, fx); err != nil {
							return err
						}
						close(inEffect)
						<-finishA
						if tt.aFails {
							return errors.New("A fails inside its effect")
						}
						return nil
					})
					if err != nil {
						return nil, err
					}
					return fx.Result, nil
				})
			}()
			select {
			case <-inEffect:
			case out := <-aDone:
				t.Fatalf("A's Guard ended before its effect: %v (%v)", out.Disposition, out.Err)
			}

			// B takes the key over when A's lease lapses, and its effect's
			// insert waits for A's transaction.
			bDone := make(chan claimd.Outcome, 1)
			go func() {
				req := stripe(id)
				req.Wait = 10 * time.Second
				bDone <- b.Guard(ctx, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
					fx, err := claimd.Effect(ctx, db, writeLedger(d, id, "B", []byte("from B")))
					if err != nil {
						return nil, err
					}
					return fx.Result, nil
				})
			}()
			if err := waitLockWaiter(ctx, db); err != nil {
				close(finishA)
				t.Fatalf("B's effect never waited on A's fence: %v", err)
			}
			close(finishA)
			outA, outB := <-aDone, <-bDone

			// A's claim was taken over: its settle (or release) is stale.
			if outA.Status != http.StatusConflict || outA.Disposition != claimd.Superseded {
				t.Errorf("A's Guard = %d %v (%v), want 409 superseded", outA.Status, outA.Disposition, outA.Err)
			}
			if outB.Status != http.StatusOK || string(outB.Body) != tt.result || outB.Effect == nil || outB.Effect.Done != tt.bDone {
				t.Errorf("B's Guard = %d %q (effect %+v, err %v), want 200 %q with effect done %v", outB.Status, outB.Body, outB.Effect, outB.Err, tt.result, tt.bDone)
			}
			if !outB.Claim.TakenOver() {
				t.Errorf("B's claim reason = %v, want LEASE_EXPIRED", outB.Claim.GetReason())
			}
			if got := bRecovered.Load(); got != tt.bRecover {
				t.Errorf("B's settle carried effect_recovered = %v, want %v", got, tt.bRecover)
			}
			if diff := cmp.Diff([]string{tt.writer}, ledgerWriters(t, db, d, id)); diff != "" {
				t.Errorf("ledger writers (-want +got):\n%s", diff)
			}
			f, err := readFence(ctx, db, d, namespace, "stripe", id)
			if err != nil || f == nil || f.Token != tt.token || string(f.Result) != tt.result {
				t.Errorf("fence = %+v, %v; want token %d result %q", f, err, tt.token, tt.result)
			}
			rec, err := b.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
			if err != nil || rec.GetState() != claimd.StateSettled || string(rec.GetResult()) != tt.result {
				t.Errorf("record = %v %q, %v; want SETTLED %q", rec.GetState(), rec.GetResult(), err, tt.result)
			}
		})
	}
}

// waitLockWaiter returns once a session of db's database waits on a lock
// (B's insert behind A's fence row), or fails after 10s. Polling PostgreSQL's
// own view of its sessions is the condition; the interval is not
// synchronisation.
func waitLockWaiter(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		switch {
		case err != nil:
			return err
		case n > 0:
			return nil
		case time.Now().After(deadline):
			return errors.New("no session waits on a lock within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEffectsSchemaRacePostgres: pools that create claimd_effects at the
// same moment (CREATE TABLE IF NOT EXISTS races on PostgreSQL's catalog) all
// succeed.
func TestEffectsSchemaRacePostgres(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	url := postgres(t)
	const n = 6
	dbs := make([]*sql.DB, n)
	for i := range dbs {
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if err := db.PingContext(ctx); err != nil { // connect before the start line
			t.Fatal(err)
		}
		dbs[i] = db
	}
	start := make(chan struct{})
	errs := make(chan error, n)
	for _, db := range dbs {
		go func() {
			<-start
			_, err := claimd.PruneEffects(ctx, db, time.Now())
			errs <- err
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("PruneEffects on a new database, %d pools at once: %v", n, err)
		}
	}
}
