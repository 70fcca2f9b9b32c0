//go:build !purego

package checksum

import (
	"fmt"
	"testing"
)

// BenchmarkFusedStores is the measurement behind ntMin: the fused AVX2 copy
// with regular stores, with non-temporal stores, and copy() followed by
// Checksum, at sizes around the caches (1 MiB L2, 32 MiB L3 here).
func BenchmarkFusedStores(b *testing.B) {
	if !useAVX2 {
		b.Skip("no AVX2")
	}
	for _, n := range []int{1 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20} {
		src, dst := benchData(n), make([]byte, n)
		for _, v := range []struct {
			name string
			f    func(dst, src []byte) uint64
		}{
			{"regular", func(d, s []byte) uint64 { return copySumAVX2From(d, s, 1<<62) }},
			{"nontemporal", func(d, s []byte) uint64 { return copySumAVX2From(d, s, 0) }},
			{"copy-then-sum", func(d, s []byte) uint64 { n := copy(d, s); return sumLE(d[:n]) }},
		} {
			b.Run(fmt.Sprintf("%s/%dMiB", v.name, n>>20), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					sink64 = v.f(dst, src)
				}
			})
		}
	}
}
