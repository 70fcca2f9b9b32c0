//go:build !amd64 || purego

package checksum

// Without an assembly path (other architectures, or the purego build tag) the
// pure-Go code is the implementation.

func sumLE(b []byte) uint64 { return sumGeneric(b) }

func copySumLE(dst, src []byte) uint64 { return copySumGeneric(dst, src) }

// archImpls lists the architecture-specific implementations for the tests.
func archImpls() []impl { return nil }

func maxBlock() int { return 1 << 20 }

// readLimit is the benchmarks' read-bandwidth anchor; none without assembly.
var readLimit func([]byte) uint64
