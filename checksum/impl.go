package checksum

import "math/bits"

// impl names one implementation of the two primitives every exported function
// is built on, so the tests can check each one the machine can run against the
// reference, not only the one chosen at init.
type impl struct {
	name string
	sum  func(b []byte) uint64
	// checksum is the sum of b folded with the little-endian partial init
	// (Checksum's form), nil where the implementation has none.
	checksum func(b []byte, init uint64) uint16
	copySum  func(dst, src []byte) uint64 // len(dst) == len(src)
	// copyChecksum is copySum folded with the little-endian partial init
	// (CopyAndChecksum's form), nil where the implementation has none.
	copyChecksum func(dst, src []byte, init uint64) uint16
}

// genericImpl is the pure-Go implementation, available everywhere.
var genericImpl = impl{
	name: "generic", sum: sumGeneric, checksum: checksumGeneric,
	copySum: copySumGeneric, copyChecksum: copyChecksumGeneric,
}

// shortImpl is CopyAndChecksum's direct path (copyChecksumShort: the
// register copy up to copyRegMax, copy() and the sum of src beyond), with the
// pure-Go sum, so that the sweeps run its copy at every length and alignment
// too.
var shortImpl = impl{
	name: "generic-short", sum: sumGeneric, checksum: checksumGeneric,
	copySum: func(dst, src []byte) uint64 {
		return uint64(bits.ReverseBytes16(copyChecksumShort(dst, src, 0)))
	},
	copyChecksum: func(dst, src []byte, init uint64) uint16 {
		return copyChecksumShort(dst, src, finish(init))
	},
}
