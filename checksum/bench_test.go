package checksum

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// The benchmarks call the code under test through //go:noinline wrappers: a
// loop inlined into the b.Loop body keeps its accumulator in memory and
// measures about half the real speed.
//
// Anchors in the same run: BenchmarkCopy (Go's copy, memmove), BenchmarkRead
// (the fastest read of every byte, amd64 only: the memory read limit),
// BenchmarkCopyThenChecksum (copy() followed by Checksum, what
// CopyAndChecksum must beat) and BenchmarkCRC32C (hash/crc32 Castagnoli).

var benchSizes = []int{64, 1500, 64 << 10, 1 << 20}

var (
	sink16 uint16
	sink64 uint64
)

//go:noinline
func doChecksum(b []byte) uint16 { return Checksum(b, 0) }

//go:noinline
func doGeneric(b []byte) uint16 { return Combine(0, finish(sumGeneric(b))) }

//go:noinline
func doCopy(dst, src []byte) int { return copy(dst, src) }

//go:noinline
func doCopyThenChecksum(dst, src []byte) uint16 {
	n := copy(dst, src)
	return Checksum(dst[:n], 0)
}

//go:noinline
func doCopyAndChecksum(dst, src []byte) uint16 { return CopyAndChecksum(dst, src, 0) }

//go:noinline
func doCopyAndChecksumGeneric(dst, src []byte) uint16 {
	return Combine(0, finish(copySumGeneric(dst[:len(src)], src)))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

//go:noinline
func doCRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

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
				sink16 = f(buf)
			}
		})
	}
}

func benchCopy(b *testing.B, f func(dst, src []byte) uint16) {
	for _, n := range benchSizes {
		src, dst := benchData(n), make([]byte, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				sink16 = f(dst, src)
			}
		})
	}
}

func BenchmarkChecksum(b *testing.B)        { benchSum(b, doChecksum) }
func BenchmarkChecksumGeneric(b *testing.B) { benchSum(b, doGeneric) }

func BenchmarkCopy(b *testing.B) {
	benchCopy(b, func(dst, src []byte) uint16 { return uint16(doCopy(dst, src)) })
}

func BenchmarkCopyThenChecksum(b *testing.B)       { benchCopy(b, doCopyThenChecksum) }
func BenchmarkCopyAndChecksum(b *testing.B)        { benchCopy(b, doCopyAndChecksum) }
func BenchmarkCopyAndChecksumGeneric(b *testing.B) { benchCopy(b, doCopyAndChecksumGeneric) }

func BenchmarkCRC32C(b *testing.B) {
	benchSum(b, func(p []byte) uint16 { return uint16(doCRC32C(p)) })
}

func BenchmarkRead(b *testing.B) {
	if readLimit == nil {
		b.Skip("no read-limit anchor on this architecture")
	}
	benchSum(b, func(p []byte) uint16 { return uint16(readLimit(p)) })
}

// BenchmarkChecksummer writes a 64 KiB payload in 1448-byte chunks (an
// Ethernet TCP segment's payload) through the hash.Hash tap, by Write and by
// CopyAndWrite.
func BenchmarkChecksummer(b *testing.B) {
	const chunk = 1448
	src, dst := benchData(64<<10), make([]byte, 64<<10)
	c := New(0)
	b.Run("Write", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			c.Reset()
			for off := 0; off < len(src); off += chunk {
				c.Write(src[off:min(off+chunk, len(src))])
			}
			sink16 = c.Sum16()
		}
	})
	b.Run("CopyAndWrite", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			c.Reset()
			for off := 0; off < len(src); off += chunk {
				end := min(off+chunk, len(src))
				c.CopyAndWrite(dst[off:end], src[off:end])
			}
			sink16 = c.Sum16()
		}
	})
}

// pairSizes are the sizes at which BenchmarkCopyPair compares CopyAndChecksum
// with its anchor: the four, and the short lengths around the
// strategy switches (the word tail, 128 bytes, avx2Min).
var pairSizes = []int{16, 64, 128, 129, 255, 1500, 64 << 10, 1 << 20}

// BenchmarkCopyPair runs copy() followed by Checksum ("then") and
// CopyAndChecksum ("fused") side by side at each size, on the same source and
// destination buffers, each through one //go:noinline wrapper of the same
// shape, so the two differ only in the code under test and are measured
// seconds apart.
func BenchmarkCopyPair(b *testing.B) {
	for _, n := range pairSizes {
		src, dst := benchData(n), make([]byte, n)
		for _, v := range []struct {
			name string
			f    func(dst, src []byte) uint16
		}{{"then", doCopyThenChecksum}, {"fused", doCopyAndChecksum}} {
			b.Run(fmt.Sprintf("%d/%s", n, v.name), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					sink16 = v.f(dst, src)
				}
			})
		}
	}
}
