package claimd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
)

// claimsServed reads how many claims a server answered from its
// claimd_claims_total counters.
func claimsServed(t *testing.T, s *claimdtest.Server) int {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0.0
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "claimd_claims_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	return int(total)
}

// TestDialReplicasBalancesAndSurvivesAStop: calls to three replicas reach
// every one of them, and with one replica stopped every call still
// succeeds on the others.
func TestDialReplicasBalancesAndSurvivesAStop(t *testing.T) {
	var (
		servers []*claimdtest.Server
		addrs   []string
	)
	for range 3 {
		s := claimdtest.StartT(t, binary)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	c, err := claimd.DialReplicas(ctxT(t), addrs, claimd.WithLogger(quiet), claimd.WithRetry(fastRetry))
	if err != nil {
		t.Fatalf("DialReplicas(%v) = %v", addrs, err)
	}
	t.Cleanup(func() { c.Close() })

	claimN := func(n int) {
		t.Helper()
		for range n {
			cl, err := c.Claim(ctxT(t), claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: eventID(t)})
			if err != nil {
				t.Fatalf("Claim() = %v", err)
			}
			if !cl.Acquired() {
				t.Fatalf("Claim(new key) outcome = %v, want ACQUIRED", cl.GetOutcome())
			}
		}
	}
	// Dial returns once one replica is ready; the others join as their
	// connection and first health check complete. Claim until each has
	// served one, within a bound.
	deadline := time.Now().Add(20 * time.Second)
	for {
		claimN(10)
		idle := -1
		for i, s := range servers {
			if claimsServed(t, s) == 0 {
				idle = i
			}
		}
		if idle < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d (%s) served no claim within 20s: calls are not spread", idle, servers[idle].Addr)
		}
	}

	// Stop one replica while callers keep claiming: no call may fail.
	const callers = 4
	ctx, cancel := context.WithCancel(ctxT(t))
	done, failed := make(chan struct{}), make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				cl, err := c.Claim(ctxT(t), claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: eventID(t)})
				if err == nil && !cl.Acquired() {
					err = fmt.Errorf("Claim(new key) outcome = %v, want ACQUIRED", cl.GetOutcome())
				}
				if err != nil {
					failed <- err
					return
				}
				select {
				case done <- struct{}{}:
				case <-ctx.Done():
				}
			}
		})
	}
	wait := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-done:
			case err := <-failed:
				cancel()
				t.Fatalf("Claim() while a replica stops = %v", err)
			}
		}
	}
	wait(20)
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	before := claimsServed(t, servers[1]) + claimsServed(t, servers[2])
	wait(30)
	cancel()
	wg.Wait()
	select {
	case err := <-failed:
		t.Fatalf("Claim() while a replica stops = %v", err)
	default:
	}
	// Each caller may have had one claim answered before the count was read
	// and reported after it.
	if after := claimsServed(t, servers[1]) + claimsServed(t, servers[2]); after-before < 30-callers {
		t.Fatalf("claims served by the two live replicas after the stop = %d, want at least %d", after-before, 30-callers)
	}
}

// TestDialReplicasRefusesNoAddress: an empty list is a caller's error, not
// a connection that never becomes ready; and as for Dial, plaintext to a
// replica that is not on loopback needs WithInsecure.
func TestDialReplicasRefusesNoAddress(t *testing.T) {
	for _, addrs := range [][]string{nil, {"127.0.0.1:1", ""}, {"127.0.0.1:1", "10.0.0.1:50051"}} {
		_, err := claimd.DialReplicas(context.Background(), addrs)
		if !errors.Is(err, claimd.ErrInvalidArgument) {
			t.Fatalf("DialReplicas(%q) error = %v, want ErrInvalidArgument", addrs, err)
		}
	}
}
