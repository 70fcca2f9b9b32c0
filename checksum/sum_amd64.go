//go:build !purego

package checksum

func sumLE(b []byte) uint64 { return sumGeneric(b) }

func copySumLE(dst, src []byte) uint64 { return copySumGeneric(dst, src) }

func archImpls() []impl { return nil }

func maxBlock() int { return 1 << 20 }
