package redis

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Sizes of the stripe provider, the suite's reference.
const (
	testLease      = 60 * time.Second
	testTTL        = 84 * time.Hour
	testPendingTTL = 5 * time.Second
)

// newStore opens a Store over url, closed when t ends.
func newStore(t testing.TB, url string) *Store {
	t.Helper()
	s, err := New(testCtx(t), Config{URL: url})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawClient is a plain client for looking at what the scripts left in Redis.
func rawClient(t testing.TB, url string) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testNS returns a namespace no other test uses, so tests share one server.
func testNS() string { return "t" + strings.ToLower(rand.Text()[:10]) }

func hash(s string) []byte {
	h := make([]byte, 32)
	copy(h, s)
	return h
}

// claimRecord is the record a first claim of k at now creates.
func claimRecord(k tiers.Key, now time.Time) tiers.Record {
	return tiers.NewRecord(tiers.ClaimParams{
		Key: k, Now: now, Lease: testLease, TTL: testTTL,
		PayloadHash: hash("payload-a"), Holder: "pod-a", AttemptID: "att-1",
	})
}
