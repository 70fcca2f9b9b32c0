package checksum

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// sumGeneric returns the little-endian partial of b (see finish) in pure Go:
// checksumGeneric's folded sum, byte-swapped back.
func sumGeneric(b []byte) uint64 { return uint64(bits.ReverseBytes16(checksumGeneric(b, 0))) }

// checksumGeneric returns the folded big-endian sum of b added to init, a
// little-endian partial (see finish): Checksum's pure-Go body. It does all its
// work in one frameless leaf, so a call to Checksum is one call, and folds at
// the end with two rotate-and-add steps; the initial value rides in the first
// chain's accumulator (any 64-bit value is safe there: every addition into it
// has its carry counted).
//
// Whole 64-byte rounds beyond shortLoopMax go through two independent ADD/ADC
// chains of four words each, the trick of Linux's csum_partial: the CPU
// renames the carry flag, so the two chains run side by side where one chain
// would wait on each carry. Each chain's last carry goes into a counter the
// two share (an ADC of zero), so no carry has to survive the loop's compare.
// Up to shortLoopMax one chain per round runs over three sums instead (see
// there). The loads go through
// encoding/binary on an array pointer: one unaligned 64-bit load each where the
// architecture has them, byte loads elsewhere, and no bounds checks.
//
// It is one function on purpose, and flat: the tail's three unrolled steps,
// then one of two unrolled loops. A helper for the tail or for either loop
// would be over the inlining budget, so it would be a call with a frame, and
// the sums and the carry counter would cross it in memory instead of staying
// in registers; the function would stop being a frameless leaf.
func checksumGeneric(b []byte, init uint64) uint16 {
	// Everything is addressed by pointer and index, never through a
	// re-sliced b, both chains share one carry counter, and the tail is
	// summed before the loop: so the loop's pointer, index, two sums and
	// counter stay in registers beside its eight loads (with b's header and
	// a bound alive across it, the compiler reloaded three or four values
	// from the stack every round). No pointer is formed past the last byte.
	var a1, cnt, c uint64
	a0 := init
	n := len(b)
	p := unsafe.Pointer(unsafe.SliceData(b))
	// The tail first (under 64 bytes from i, by its length's bits: 32, 16
	// and 8 bytes into the same two chains), so that nothing but the sums is
	// alive after the loop.
	i := n &^ 63
	r := n & 63
	if r&32 != 0 {
		x := (*[32]byte)(unsafe.Add(p, i))
		a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[0:8]), 0)
		a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[8:16]), c)
		cnt, _ = bits.Add64(cnt, 0, c)
		a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[16:24]), 0)
		a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[24:32]), c)
		cnt, _ = bits.Add64(cnt, 0, c)
		i += 32
	}
	if r&16 != 0 {
		x := (*[16]byte)(unsafe.Add(p, i))
		a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[0:8]), 0)
		cnt, _ = bits.Add64(cnt, 0, c)
		a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[8:16]), 0)
		cnt, _ = bits.Add64(cnt, 0, c)
		i += 16
	}
	if r&8 != 0 {
		a0, c = bits.Add64(a0, binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, i))[:]), 0)
		cnt, _ = bits.Add64(cnt, 0, c)
	}
	// Under 8 bytes left, at an offset that is a multiple of 8: each byte
	// goes into t at its little-endian position, so the parity of its offset
	// (all that matters modulo 2^16-1) is kept.
	if k := r & 7; k != 0 {
		var t uint64
		if n >= 8 {
			// One load of the 8 bytes that end the buffer, overlapping
			// bytes already summed; the shift drops those and puts the
			// last k at positions 0..k-1.
			t = binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, n-8))[:]) >> (64 - 8*k)
		} else {
			x := b // i == 0 here
			if len(x) >= 4 {
				t = uint64(binary.LittleEndian.Uint32(x))
				x = x[4:]
			}
			if len(x) >= 2 {
				t += uint64(binary.LittleEndian.Uint16(x)) << 32
				x = x[2:]
			}
			if len(x) == 1 {
				t += uint64(x[0]) << 48 // an even offset: the high byte of a big-endian word
			}
		}
		a1, c = bits.Add64(a1, t, 0)
		cnt += c
	}
	if m := n &^ 63; m > shortLoopMax {
		// Addressed from the last whole round's start by an index that runs
		// up to 0, so the loop holds no bound in a register.
		q := unsafe.Add(p, m-64)
		for i := 64 - m; i <= 0; i += 64 {
			x := (*[64]byte)(unsafe.Add(q, i))
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[0:8]), 0)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[8:16]), c)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[16:24]), c)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[24:32]), c)
			cnt, _ = bits.Add64(cnt, 0, c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[32:40]), 0)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[40:48]), c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[48:56]), c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[56:64]), c)
			cnt, _ = bits.Add64(cnt, 0, c)
		}
	} else if m > 0 {
		// From the last whole round back to the first, so that the loop's
		// bound is p itself, which the compiler reloads from b's argument
		// slot: no frame. One carry chain per round runs over three sums
		// (3, 3 and 2 words), so each sum waits on at most 3 additions
		// per round; the chain's last carry goes into cnt.
		q := unsafe.Add(p, m-64)
		var a2 uint64
		for {
			x := (*[64]byte)(q)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[0:8]), 0)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[8:16]), c)
			a0, c = bits.Add64(a0, binary.LittleEndian.Uint64(x[16:24]), c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[24:32]), c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[32:40]), c)
			a1, c = bits.Add64(a1, binary.LittleEndian.Uint64(x[40:48]), c)
			a2, c = bits.Add64(a2, binary.LittleEndian.Uint64(x[48:56]), c)
			a2, c = bits.Add64(a2, binary.LittleEndian.Uint64(x[56:64]), c)
			cnt, _ = bits.Add64(cnt, 0, c)
			if q == p {
				break
			}
			q = unsafe.Add(q, -64)
		}
		a0, c = bits.Add64(a0, a2, 0)
		cnt, _ = bits.Add64(cnt, 0, c)
	}
	// a0 + a1 + cnt with its two carries: the last "+ c" cannot wrap (that
	// would need a0 + a1 >= 2^65 - 1).
	a0, c = bits.Add64(a0, a1, 0)
	a0, c = bits.Add64(a0, cnt, c)
	return finish(a0 + c)
}

// shortLoopMax is the largest whole-round length checksumGeneric sums with its
// short-buffer loop (one carry chain over three sums, run backward); longer
// buffers take the two-chain loop, which is the faster of the two on long
// buffers and the slower on packet-sized ones (BenchmarkChecksumGeneric at
// 1500 B and 64 KiB, or the gVisor comparison in docs/bench).
const shortLoopMax = 8 << 10

// copyRegMax is the longest copy copyChecksumShort does through registers;
// longer ones call memmove (through copy()).
const copyRegMax = 256

// genericCopyChunk is how much copyChecksumGeneric copies before it sums
// what it copied: small enough that the copied chunk is still in the L2 cache
// for the sum, and that memmove never switches to non-temporal stores (it does
// from 1 MiB on amd64, which would send the sum to DRAM), large enough that up
// to it the fused call is exactly copy() then the sum. It must be even.
const genericCopyChunk = 64 << 10

// copyChecksumGeneric copies src into dst and returns the folded sum of the
// copied bytes added to the little-endian partial init; it panics if
// len(dst) < len(src) (CopyAndChecksum's contract).
// A scalar loop that loads, stores and adds each word is slower than memmove
// followed by a fast sum (and so, measured, was a copy through registers even
// at 16 to 128 bytes), so up to genericCopyChunk this is copy() then
// checksumGeneric, and beyond it copies cache-sized chunks and sums each while
// it is hot. Summing dst after the copy makes overlapping dst and src behave
// like copy(); overlapping buffers are copied whole, since a piece could
// otherwise read bytes a previous piece already overwrote.
func copyChecksumGeneric(dst, src []byte, init uint64) uint16 {
	if len(dst) < len(src) {
		panic(errShortDst)
	}
	dst = dst[:len(src)]
	if overlaps(dst, src) {
		copy(dst, src)
		return checksumGeneric(dst, init)
	}
	if len(src) <= genericCopyChunk {
		// src holds the same bytes as dst; the sum's loads then need not
		// wait for memmove's stores.
		copy(dst, src)
		return checksumGeneric(src, init)
	}
	s := init
	for len(src) > 0 {
		n := min(len(src), genericCopyChunk)
		copy(dst[:n], src[:n])
		s = add64(s, sumGeneric(dst[:n]))
		dst, src = dst[n:], src[n:]
	}
	return finish(s)
}

// copySumGeneric is copyChecksumGeneric as a little-endian partial.
func copySumGeneric(dst, src []byte) uint64 {
	return uint64(bits.ReverseBytes16(copyChecksumGeneric(dst, src, 0)))
}

// copySumTail copies src into dst (len(dst) >= len(src), no overlap) word by
// word and returns the little-endian partial of src, without calls: for the
// tails under 32 bytes that the faster paths leave.
func copySumTail(dst, src []byte) uint64 {
	var s, cnt, c uint64
	for len(src) >= 8 {
		w := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, w)
		s, c = bits.Add64(s, w, 0)
		cnt += c
		src, dst = src[8:], dst[8:]
	}
	var t uint64
	if len(src) >= 4 {
		w := binary.LittleEndian.Uint32(src)
		binary.LittleEndian.PutUint32(dst, w)
		t = uint64(w)
		src, dst = src[4:], dst[4:]
	}
	if len(src) >= 2 {
		w := binary.LittleEndian.Uint16(src)
		binary.LittleEndian.PutUint16(dst, w)
		t += uint64(w) << 32
		src, dst = src[2:], dst[2:]
	}
	if len(src) == 1 {
		dst[0] = src[0]
		t += uint64(src[0]) << 48
	}
	s, c = bits.Add64(s, t, 0)
	return add64(s, cnt+c)
}

// copyChecksumShort is CopyAndChecksum where the pure-Go sum is the fast
// path (in the default amd64 build below avx2Min, elsewhere at every length);
// CopyAndChecksum inlines to one call of it, so that it makes no more calls
// than copy() followed by Checksum. Up to copyRegMax bytes it copies through
// registers, without calling memmove: 16 bytes per move (a [16]byte
// assignment is one MOVUPS load and store on amd64), the last 16 (or 8, 4, 2)
// bytes by one move that may overlap the one before, as memmove does for
// short lengths; dst and src do not overlap there (one unsigned compare:
// dst[:n] and src overlap exactly when -n < d-s < n), so the order of the
// moves does not matter. The sum then reads src, which holds the same bytes
// as dst, so that its loads need not wait for the stores. Longer, empty and
// overlapping buffers go to copyChecksumGeneric.
func copyChecksumShort(dst, src []byte, initial uint16) uint16 {
	n := len(src)
	if len(dst) < n {
		panic(errShortDst)
	}
	init := uint64(bits.ReverseBytes16(initial))
	d := unsafe.Pointer(unsafe.SliceData(dst))
	s := unsafe.Pointer(unsafe.SliceData(src))
	if n > copyRegMax || uintptr(d)-uintptr(s)+uintptr(n-1) < uintptr(2*n-1) {
		return copyChecksumGeneric(dst, src, init)
	}
	switch {
	case n >= 32:
		for i := 0; i < n-32; i += 32 {
			*(*[16]byte)(unsafe.Add(d, i)) = *(*[16]byte)(unsafe.Add(s, i))
			*(*[16]byte)(unsafe.Add(d, i+16)) = *(*[16]byte)(unsafe.Add(s, i+16))
		}
		*(*[16]byte)(unsafe.Add(d, n-32)) = *(*[16]byte)(unsafe.Add(s, n-32))
		*(*[16]byte)(unsafe.Add(d, n-16)) = *(*[16]byte)(unsafe.Add(s, n-16))
	case n >= 16:
		*(*[16]byte)(d) = *(*[16]byte)(s)
		*(*[16]byte)(unsafe.Add(d, n-16)) = *(*[16]byte)(unsafe.Add(s, n-16))
	case n >= 8:
		*(*[8]byte)(d) = *(*[8]byte)(s)
		*(*[8]byte)(unsafe.Add(d, n-8)) = *(*[8]byte)(unsafe.Add(s, n-8))
	case n >= 4:
		*(*[4]byte)(d) = *(*[4]byte)(s)
		*(*[4]byte)(unsafe.Add(d, n-4)) = *(*[4]byte)(unsafe.Add(s, n-4))
	case n >= 2:
		*(*[2]byte)(d) = *(*[2]byte)(s)
		*(*[2]byte)(unsafe.Add(d, n-2)) = *(*[2]byte)(unsafe.Add(s, n-2))
	default:
		*(*byte)(d) = *(*byte)(s)
	}
	return checksumGeneric(src, init)
}

// copyChecksumLong is CopyAndChecksum with its initial value converted for
// copyChecksum.
func copyChecksumLong(dst, src []byte, initial uint16) uint16 {
	return copyChecksum(dst, src, uint64(bits.ReverseBytes16(initial)))
}
