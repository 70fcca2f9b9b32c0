package checksum

import (
	"fmt"
	"testing"
)

// The benchmarks call the code under test through //go:noinline wrappers: a
// loop inlined into the b.Loop body keeps its accumulator in memory and
// measures about half the real speed (see the package README).

var benchSizes = []int{64, 1500, 64 << 10, 1 << 20}

var sink uint16

//go:noinline
func doChecksum(b []byte) uint16 { return Checksum(b, 0) }

//go:noinline
func doGeneric(b []byte) uint16 { return finish(sumGeneric(b)) }

//go:noinline
func doCopy(dst, src []byte) int { return copy(dst, src) }

//go:noinline
func doCopyThenChecksum(dst, src []byte) uint16 {
	n := copy(dst, src)
	return Checksum(dst[:n], 0)
}

//go:noinline
func doCopyAndChecksum(dst, src []byte) uint16 { return CopyAndChecksum(dst, src, 0) }

func benchData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func benchSum(b *testing.B, f func([]byte) uint16) {
	for _, n := range benchSizes {
		buf := benchData(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				sink = f(buf)
			}
		})
	}
}

func BenchmarkChecksum(b *testing.B)        { benchSum(b, doChecksum) }
func BenchmarkChecksumGeneric(b *testing.B) { benchSum(b, doGeneric) }
