package redis

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// maxSettledBytes is issue 36's bound on what a settled record costs Redis.
const maxSettledBytes = 300

// stripeSettled is a settled record shaped like a real one: a Stripe event
// id, a pod's holder, a base64url attempt fingerprint, a SHA-256 payload
// hash, the owner's salt and secret hash, and result.
func stripeSettled(ns string, now time.Time, result []byte) tiers.Record {
	rec := tiers.NewRecord(tiers.ClaimParams{
		Key: tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_1NG8Du2eZvKYlo2CUI79vXWy"}, Now: now,
		Lease: time.Minute, TTL: 84 * time.Hour,
		PayloadHash: bytes.Repeat([]byte{0xab}, 32), Holder: "billing-worker-7d9f8b6c5-x2x4q/1",
		AttemptID: strings.Repeat("a", 43),
		Salt:      bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: bytes.Repeat([]byte{2}, tiers.SecretHashBytes),
	})
	rec.State, rec.Version, rec.Token = tiers.StateSettled, 3, 1
	rec.Result = result
	rec.UpdatedAt = now.Add(1500 * time.Millisecond)
	return rec
}

// TestSettledRecordBytes: a typical Stripe key settled with a small result
// costs Redis at most maxSettledBytes by its own account (MEMORY USAGE: the
// key, its value and its entry in the keyspace; not its entry in the table
// of expiries, about 30 bytes more, which capacity's used_memory counts),
// and so does one with the longest result kept inline, or a long one.
func TestSettledRecordBytes(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := newStore(t, url)
	raw := rawClient(t, url)
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()[:7] // as long as "billing", and no other test's
	for _, result := range []string{
		`{"charge":"ch_3NG8Du2eZvKYlo2C","status":"ok"}`,
		strings.Repeat("r", MaxInlineResult), // the longest kept inline
		strings.Repeat("r", 4096),            // kept by the durable tier only
	} {
		rec := stripeSettled(ns, now, []byte(result))
		rec.Key.Key += strconv.Itoa(len(result))
		mustPut(t, s, rec)
		n, err := raw.MemoryUsage(ctx, s.key(rec.Key), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MEMORY USAGE %s = %d bytes (a %d-byte result)", s.key(rec.Key), n, len(result))
		if n > maxSettledBytes {
			t.Errorf("MEMORY USAGE of a settled Stripe record with a %d-byte result = %d bytes, want at most %d", len(result), n, maxSettledBytes)
		}
	}
}
