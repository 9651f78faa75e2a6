package service

import "testing"

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
