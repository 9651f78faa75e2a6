package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestRelaxedDurabilityIsAnnounced: --sqlite-durability=relaxed warns at
// start what it may lose, and says so in the start line and in /metrics.
func TestRelaxedDurabilityIsAnnounced(t *testing.T) {
	p := start(t, "--data-dir", t.TempDir(), "--sqlite-durability", "relaxed")
	warn := p.logs.wait(t, "warning of relaxed durability", func(r map[string]any) bool {
		return r["level"] == "WARN" && r["sqlite_durability"] == "relaxed"
	})
	for _, want := range []string{"power loss", "fsync"} {
		if msg, _ := warn["msg"].(string); !strings.Contains(msg, want) {
			t.Errorf("relaxed durability warning %q does not mention %q", msg, want)
		}
	}
	serving := p.logs.wait(t, `"claimd serving"`, func(r map[string]any) bool { return r["msg"] == "claimd serving" })
	if serving["durability"] != "relaxed" {
		t.Errorf(`"claimd serving" durability = %v, want relaxed`, serving["durability"])
	}
	_, body := get(t, "http://"+p.http+"/metrics")
	if !strings.Contains(body, `claimd_sqlite_durability{mode="relaxed"} 1`) || strings.Contains(body, `mode="full"`) {
		t.Errorf("/metrics claimd_sqlite_durability lines:\n%s\nwant only mode=\"relaxed\" 1", grepLines(body, "claimd_sqlite_durability"))
	}
	p.stop(t)
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestSQLiteDurabilityUsage(t *testing.T) {
	tests := []struct {
		desc string
		args []string
	}{
		{"unknown mode", []string{"serve", "--sqlite-durability", "normal"}},
		{"relaxed with PostgreSQL", []string{"serve", "--postgres-url", "postgres://127.0.0.1:1/x", "--sqlite-durability", "relaxed"}},
	}
	for _, tc := range tests {
		out, code := run(t, tc.args...)
		if code != 2 || !strings.Contains(out, "--sqlite-durability") {
			t.Errorf("%s: claimd %v = exit %d\n%s\nwant 2 naming --sqlite-durability", tc.desc, tc.args, code, out)
		}
	}
}

// TestKillMidLoadLosesNothingAcknowledged: claimd on the embedded tier is
// killed by SIGKILL while callers claim new keys and settle most of them,
// then restarted on the same data directory. Every key whose SETTLED it
// acknowledged still answers DUPLICATE with its result, and no key it
// answered ACQUIRED is handed out again: nothing is answered before its
// group commit is on disk.
//
// A killed process is the failure a test can stage here. An OS crash or a
// power loss cannot be (that takes a machine, or a block device, that drops
// what was not fsynced); what the default durability adds for those is the
// fsync of every commit before its answer, which
// internal/tiers/sqlite.TestDurabilityPragma pins.
func TestKillMidLoadLosesNothingAcknowledged(t *testing.T) {
	dataDir := t.TempDir()
	p := start(t, "--data-dir", dataDir)
	conn := p.conn(t)
	waitServing(t, conn)
	claims := pb.NewClaimServiceClient(conn)

	const (
		workers   = 16
		killAfter = 150 // settled keys acknowledged before the kill
	)
	var (
		mu       sync.Mutex
		acquired = map[string]uint64{} // key → token, ACQUIRED acknowledged
		settled  = map[string]bool{}   // SETTLED acknowledged
		killNow  = make(chan struct{})
		killed   bool // set under mu before the kill: later errors are expected
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !killed {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("evt_kill_%d_%d", w, i)
				c, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: key}})
				if err != nil {
					fail("Claim(%q) before the kill error = %v", key, err)
					return
				}
				if c.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
					fail("Claim(%q) before the kill = %v, want ACQUIRED", key, c.Outcome)
					return
				}
				mu.Lock()
				acquired[key] = c.FencingToken
				mu.Unlock()
				if i%3 == 2 {
					continue // a handler still at work: the key stays held
				}
				for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
					req := &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: key, FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: to}
					if to == pb.EventState_EVENT_STATE_SETTLED {
						req.Result = []byte(key)
					}
					if _, err := claims.Transition(ctx, req); err != nil {
						fail("Transition(%q, →%v) before the kill error = %v", key, to, err)
						return
					}
				}
				mu.Lock()
				settled[key] = true
				if len(settled) == killAfter {
					close(killNow)
				}
				mu.Unlock()
			}
		})
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	select {
	case <-killNow:
	case <-workersDone:
		t.Fatalf("every caller stopped before %d keys settled: %v", killAfter, failures)
	case err := <-p.exited:
		t.Fatalf("claimd exited under load: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%d settled keys not acknowledged within 60s", killAfter)
	}
	mu.Lock()
	killed = true
	mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	stopLoad()
	<-workersDone
	for _, f := range failures {
		t.Error(f)
	}

	p2 := start(t, "--data-dir", dataDir)
	conn2 := p2.conn(t)
	waitServing(t, conn2)
	claims2 := pb.NewClaimServiceClient(conn2)
	rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for key, token := range acquired {
		c, err := claims2.Claim(rctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: key}})
		if err != nil {
			t.Fatalf("Claim(%q) after restart error = %v", key, err)
		}
		switch {
		case settled[key]:
			if c.Outcome != pb.Outcome_OUTCOME_DUPLICATE || string(c.Result) != key {
				t.Errorf("Claim(%q) after restart = %v result %q; SETTLED was acknowledged, want DUPLICATE %q", key, c.Outcome, c.Result, key)
			}
		case c.Outcome == pb.Outcome_OUTCOME_ACQUIRED:
			// The lease (stripe's 60s) outlasts the test, so no takeover
			// is due either: an ACQUIRED means the acknowledged claim
			// (token) was lost.
			t.Errorf("Claim(%q) after restart = ACQUIRED/%v token %d; ACQUIRED token %d was acknowledged, want it still held", key, c.Reason, c.FencingToken, token)
		}
	}
	mu.Lock()
	t.Logf("killed after %d ACQUIRED (%d of them SETTLED) acknowledged", len(acquired), len(settled))
	mu.Unlock()
	p2.stop(t)
}
