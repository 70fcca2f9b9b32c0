//go:build !amd64 || purego

package checksum

// Without an assembly path (other architectures, or the purego build tag) the
// pure-Go code is the implementation.

func sumLE(b []byte) uint64 { return sumGeneric(b) }

// checksum is Checksum with its initial value as a little-endian partial.
func checksum(b []byte, init uint64) uint16 { return checksumGeneric(b, init) }

// copyChecksum is CopyAndChecksum with its initial value as a little-endian
// partial.
func copyChecksum(dst, src []byte, init uint64) uint16 { return copyChecksumGeneric(dst, src, init) }

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
// (Without an assembly path it inlines to one call of copyChecksumShort, so
// that it makes no more calls than copy() followed by Checksum.)
func CopyAndChecksum(dst, src []byte, initial uint16) uint16 {
	return copyChecksumShort(dst, src, initial)
}

// archImpls lists the architecture-specific implementations for the tests.
func archImpls() []impl { return nil }

func maxBlock() int { return 1 << 20 }

// readLimit is the benchmarks' read-bandwidth anchor; none without assembly.
var readLimit func([]byte) uint64
