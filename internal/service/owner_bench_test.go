package service

import (
	"testing"

	"github.com/claimd/claimd/internal/tiers"
)

func BenchmarkNewOwnership(b *testing.B) {
	for _, id := range []string{"", "att-1"} {
		b.Run("attempt="+id, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				newOwnership("p", "pod-a", id)
			}
		})
	}
}

func BenchmarkClaimOwnership(b *testing.B) {
	// What one acquiring Claim pays: its ownership, then the secret of the
	// record it wrote.
	b.ReportAllocs()
	for b.Loop() {
		o := newOwnership("p", "pod-a", "att-1")
		if _, err := o.secretOf(tiers.Record{Salt: o.salt, SecretHash: o.hash}); err != nil {
			b.Fatal(err)
		}
	}
}
