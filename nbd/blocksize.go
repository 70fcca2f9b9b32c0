package nbd

import "math"

// Every backend of this package states its block sizes.
var (
	_ BlockSizer = (*Client)(nil)
	_ BlockSizer = (*MemDisk)(nil)
)

// BlockSize reports no alignment (1), the chunk size as the preferred
// block (a smaller write into an unallocated chunk allocates all of it),
// and no limit on one call (math.MaxUint32).
func (d *MemDisk) BlockSize() (minimum, preferred, maxPayload uint32) {
	return 1, MemDiskChunkSize, math.MaxUint32
}

// BlockSizeOf returns b's block size constraints (BlockSizer), or, for a
// Backend that states none, those proto.md tells a client to assume: no
// alignment, 4 KiB preferred, 32 MiB payloads.
func BlockSizeOf(b Backend) (minimum, preferred, maxPayload uint32) {
	if s, ok := b.(BlockSizer); ok {
		return s.BlockSize()
	}
	return 1, 4096, DefaultMaxPayload
}
