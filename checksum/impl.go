package checksum

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
	// short marks an implementation only ever used on short buffers: the
	// tests skip it at the multi-megabyte switch lengths.
	short bool
}

// genericImpl is the pure-Go implementation, available everywhere.
var genericImpl = impl{name: "generic", sum: sumGeneric, checksum: checksumGeneric, copySum: copySumGeneric}

// smallImpl is the short-copy path CopyAndChecksum takes up to smallCopy
// bytes; the tests run it at every length up to 2048 all the same.
var smallImpl = impl{name: "small", sum: sumGeneric, copySum: copySumSmall, short: true}
