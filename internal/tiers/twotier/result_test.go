package twotier_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/redis"
)

// Issue 36, item 5: Redis keeps a settled record's result only when it is
// small; a duplicate of an event settled with a large one is answered with
// that result all the same, read from the durable tier, and a duplicate of a
// small one is still answered by the fast tier alone.
func TestLargeResultIsAnsweredFromTheDurableTier(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		_, keepsEverything := w.fast.Fast.(*redis.Store)
		keepsEverything = !keepsEverything // the embedded pairing's memory tier
		large := bytes.Repeat([]byte("receipt "), 512)
		for _, k := range []string{"evt_large", "evt_small"} {
			rec := w.started(k, tiers.StateProcessing)
			result := []byte("receipt")
			if k == "evt_large" {
				result = large
			}
			if _, err := w.transition(w.ctx(), k, rec.Token, tiers.StateSettled, result); err != nil {
				t.Fatal(err)
			}
		}
		w.wantFastDuplicate("evt_small", "receipt")

		dup := w.claim(w.params("evt_large", "pod-b", ""))
		want := tiers.TierDurable
		if keepsEverything {
			want = tiers.TierFast
		}
		if dup.Outcome != tiers.OutcomeDuplicate || !bytes.Equal(dup.Record.Result, large) || dup.Record.Holder != "pod-a" || dup.ServedBy != want {
			t.Fatalf("Claim(settled with a %d-byte result) = %v result of %d bytes held by %q served by %v, want DUPLICATE with the result held by pod-a served by %v",
				len(large), dup.Outcome, len(dup.Record.Result), dup.Record.Holder, dup.ServedBy, want)
		}
		if keepsEverything {
			return
		}
		// The durable tier cannot be read: the claim fails (UNAVAILABLE)
		// rather than answer a DUPLICATE without its result.
		w.durable.failGet.Store(true)
		res, err := w.store.Claim(w.ctx(), w.params("evt_large", "pod-b", ""))
		w.durable.failGet.Store(false)
		if !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("Claim(settled with a large result, durable tier unreadable) = %v with %d bytes of result, %v; want UNAVAILABLE", res.Outcome, len(res.Record.Result), err)
		}
		// A small result never needed the durable tier.
		w.durable.failGet.Store(true)
		w.wantFastDuplicate("evt_small", "receipt")
		w.durable.failGet.Store(false)
	})
}
