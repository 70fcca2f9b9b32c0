//go:build !purego

package checksum

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The amd64 fast path: AVX2 assembly in sum_amd64.s, chosen at init when the
// CPU and OS support AVX2; otherwise, and under the purego build tag, the
// pure-Go code in sum_generic.go.

//go:noescape
func sumAVX2(b []byte) uint64

//go:noescape
func copySumAVX2(dst, src []byte) uint64

//go:noescape
func copySumAVX2NT(dst, src []byte) uint64

var useAVX2 = cpu.X86.HasAVX2

const (
	// avx2Block is the most one assembly call sums: its 32-bit lanes are
	// exact up to 4 MiB (see sum_amd64.s).
	avx2Block = 1 << 20
	// avx2Min is the length below which the pure-Go sum is as fast as the
	// vector path (which has a fixed cost: the reduction, VZEROUPPER), so
	// short buffers skip it.
	avx2Min = 256
	// ntMin is the copy length from which CopyAndChecksum stores around the
	// cache. runtime.memmove does so from 1 MiB, but the fused loop keeps
	// regular stores until source plus destination crowd the L3 cache, and
	// switches where the two kinds of store tie. BenchmarkFusedStores
	// measures both kinds at sizes around the switch.
	ntMin = 8 << 20
)

// CopyAndChecksum copies src into dst and returns Checksum(src, initial),
// touching each byte once: the checksum is computed as the data moves, which
// is what a NIC or FPGA with checksum offload does (RFC 1071 section 4's
// "combined copy and checksum"). dst must be at least as long as src; only
// dst[:len(src)] is written. dst and src may overlap; the result is then the
// checksum of the bytes copy(dst, src) leaves in dst[:len(src)].
//
// It panics if len(dst) < len(src), rather than silently checksumming less
// than it was given. It does not allocate and does not retain dst or src.
//
// (It inlines to one call, through a function value: of copyChecksumShort,
// copy and the pure-Go sum, below avx2Min, and of copyChecksumLong, the fused
// AVX2 copy, from there. Two direct calls would exceed the inlining budget,
// and CopyAndChecksum would then be one call level deeper than copy()
// followed by Checksum, and slower than them on short buffers:
// BenchmarkCopyPair compares the two.)
func CopyAndChecksum(dst, src []byte, initial uint16) uint16 {
	f := copyChecksumLong
	if len(src) < avx2Min {
		f = copyChecksumShort
	}
	return f(dst, src, initial)
}

func maxBlock() int { return avx2Block }

func sumLE(b []byte) uint64 {
	if !useAVX2 || len(b) < avx2Min {
		return sumGeneric(b)
	}
	return sumAVX2Blocks(b)
}

// copyChecksum is CopyAndChecksum with its initial value as a little-endian
// partial.
func copyChecksum(dst, src []byte, init uint64) uint16 {
	if !useAVX2 || len(src) < avx2Min {
		return copyChecksumGeneric(dst, src, init)
	}
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	return finish(add64(init, copySumAVX2Blocks(dst[:len(src)], src)))
}

// checksum is Checksum with its initial value as a little-endian partial.
func checksum(b []byte, init uint64) uint16 {
	if !useAVX2 || len(b) < avx2Min {
		return checksumGeneric(b, init)
	}
	return checksumAVX2(b, init)
}

// checksumAVX2 sums b with the assembly in blocks of at most avx2Block bytes,
// added to the little-endian partial init; the tail under 32 bytes (at an
// even offset) is summed, and the whole folded, by checksumGeneric.
func checksumAVX2(b []byte, init uint64) uint16 {
	s := init
	for len(b) >= 32 {
		n := min(len(b), avx2Block) &^ 31
		s = add64(s, sumAVX2(b[:n]))
		b = b[n:]
	}
	return checksumGeneric(b, s)
}

// sumAVX2Blocks is checksumAVX2 as a little-endian partial.
func sumAVX2Blocks(b []byte) uint64 { return uint64(bits.ReverseBytes16(checksumAVX2(b, 0))) }

// copySumAVX2Blocks is the fused copy: one load of each 32 bytes, one store,
// and the sum taken from the register, with non-temporal stores from ntMin.
func copySumAVX2Blocks(dst, src []byte) uint64 { return copySumAVX2From(dst, src, ntMin) }

// copySumAVX2From is copySumAVX2Blocks with non-temporal stores from ntFrom
// bytes (the tests lower it to run that path at every length). Overlapping
// buffers fall back to the generic path, which behaves like copy().
func copySumAVX2From(dst, src []byte, ntFrom int) uint64 {
	if overlaps(dst, src) {
		return copySumGeneric(dst, src)
	}
	var s uint64
	rot := 0
	if len(src) >= ntFrom {
		// Non-temporal stores need a 32-byte aligned destination: move the
		// head in Go. If the head is odd, the rest of the bytes sit at odd
		// offsets, and their partial is byte-swapped (rotated by 8 bits,
		// which is multiplying by 2^8 modulo 2^64-1) when it is added.
		h := min(int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst)))&31), len(src))
		s = copySumTail(dst[:h], src[:h])
		dst, src = dst[h:], src[h:]
		rot = (h & 1) * 8
		for len(src) >= 32 {
			n := min(len(src), avx2Block) &^ 31
			s = add64(s, bits.RotateLeft64(copySumAVX2NT(dst[:n], src[:n]), rot))
			dst, src = dst[n:], src[n:]
		}
	}
	for len(src) >= 32 {
		n := min(len(src), avx2Block) &^ 31
		s = add64(s, bits.RotateLeft64(copySumAVX2(dst[:n], src[:n]), rot))
		dst, src = dst[n:], src[n:]
	}
	return add64(s, bits.RotateLeft64(copySumTail(dst, src), rot))
}

func archImpls() []impl {
	if !useAVX2 {
		return nil
	}
	return []impl{
		{name: "avx2", sum: sumAVX2Blocks, checksum: checksumAVX2, copySum: copySumAVX2Blocks},
		{name: "avx2-nt", sum: sumAVX2Blocks, checksum: checksumAVX2, copySum: func(dst, src []byte) uint64 { return copySumAVX2From(dst, src, 0) }},
	}
}

//go:noescape
func readAVX2(b []byte) uint64

// readLimit is the benchmarks' read-bandwidth anchor: the cheapest loop that
// loads every byte (one OR per 32 bytes), nil without AVX2.
var readLimit func([]byte) uint64

func init() {
	if useAVX2 {
		readLimit = readAVX2
	}
}
