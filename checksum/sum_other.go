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

// archImpls lists the architecture-specific implementations for the tests.
func archImpls() []impl { return nil }

func maxBlock() int { return 1 << 20 }

// readLimit is the benchmarks' read-bandwidth anchor; none without assembly.
var readLimit func([]byte) uint64
