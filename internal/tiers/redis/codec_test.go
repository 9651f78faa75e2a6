package redis

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// TestRecordCodec: every record, whatever is set or left out, decodes to
// what was encoded, seal included.
func TestRecordCodec(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}
	full := stripeSettled("billing", now, []byte("ok"))
	full.Key = k
	full.State, full.Released, full.Reason, full.Attempt = tiers.StateProcessing, true, tiers.ReasonLeaseExpired, 1<<31
	full.Token, full.Version = 1<<40, 1<<41
	mac := bytes.Repeat([]byte{7}, 16)
	for _, tc := range []struct {
		desc string
		rec  tiers.Record
	}{
		{"every field set", full},
		{"nothing but version, state and window", tiers.Record{Key: k, Version: 1, State: tiers.StateReceived, WindowExpiresAt: now}},
		{"times equal to first seen", func() tiers.Record {
			r := full
			r.LeaseExpiresAt, r.UpdatedAt = r.FirstSeenAt, r.FirstSeenAt
			return r
		}()},
		{"times before first seen", func() tiers.Record {
			r := full
			r.LeaseExpiresAt, r.UpdatedAt = r.FirstSeenAt.Add(-time.Hour), r.FirstSeenAt.Add(-time.Microsecond)
			return r
		}()},
		{"a lease without a first seen", func() tiers.Record {
			r := full
			r.FirstSeenAt = time.Time{}
			return r
		}()},
		{"a settled record, as kept", stored(stripeSettled("billing", now, []byte("ok")))},
		{"a settled record with its result in the durable tier", stored(stripeSettled("billing", now, bytes.Repeat([]byte{1}, MaxInlineResult+1)))},
	} {
		tc.rec.Key = k
		v := EncodeRecord(&tc.rec, mac)
		got, gotMAC, err := DecodeRecord(k, v)
		if err != nil {
			t.Errorf("%s: DecodeRecord error = %v", tc.desc, err)
			continue
		}
		if diff := cmp.Diff(tc.rec, got); diff != "" || !bytes.Equal(gotMAC, mac) {
			t.Errorf("%s: round trip (-encoded +decoded):\n%s\nseal %x, want %x", tc.desc, diff, gotMAC, mac)
		}
	}
}

// TestStored: a settled record keeps what an answer reads, and a long
// result only as the mark that sends a duplicate to the durable tier.
func TestStored(t *testing.T) {
	now := time.Now()
	small := stripeSettled("billing", now, []byte(strings.Repeat("r", MaxInlineResult)))
	if got := stored(small); string(got.Result) != string(small.Result) || got.AttemptID != "" || got.Salt != nil || got.SecretHash != nil || got.Token != small.Token || !got.UpdatedAt.IsZero() {
		t.Errorf("stored(settled, %d-byte result) = %+v, want the result inline, the token, and no owner secrets", MaxInlineResult, got)
	}
	long := stripeSettled("billing", now, []byte(strings.Repeat("r", MaxInlineResult+1)))
	if got := stored(long); !bytes.Equal(got.Result, resultInDurable) {
		t.Errorf("stored(settled, %d-byte result).Result = %q, want the durable tier's mark", MaxInlineResult+1, got.Result)
	}
	live := stripeSettled("billing", now, nil)
	live.State = tiers.StateProcessing
	if diff := cmp.Diff(live, stored(live)); diff != "" {
		t.Errorf("stored(in progress) dropped fields (-want +got):\n%s", diff)
	}
}

// TestDecodeRefuses: values that are not records of this layout are
// errors, never a record that a seal could then be checked on.
func TestDecodeRefuses(t *testing.T) {
	k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}
	for _, v := range []string{
		"",
		"p123:nonce",               // a marker
		"\x02\x08\x01\x10\x01",     // another format
		"\x01\x08",                 // a varint cut short
		"\x01\x1a\x10ab",           // bytes cut short
		"\x01\xa0\x01\x01",         // field 20: unknown
		"\x01\x0a\x01x",            // field 1 as bytes
		"\x01\x20\x80\x02",         // state 256
		"\x01\x0d\x00\x00\x00\x00", // a fixed32
	} {
		if rec, _, err := DecodeRecord(k, []byte(v)); err == nil {
			t.Errorf("DecodeRecord(%q) = %+v, want an error", v, rec)
		}
	}
}
