package aoe

import "unsafe"

// framePageOffset is where in a page the first byte of every frame buffer
// of the target sits.
//
// The kernel copies a received frame into its buffer with one string copy,
// and that copy runs several times slower when the destination is a little
// ahead of the source modulo 4096: the processor takes the buffer's stores
// for writes to the addresses the next loads read (4K aliasing). Received
// frames mostly sit at the start of a page fragment, 64 bytes into a socket
// buffer's head, or 256 bytes into a page-pool page, and Go places a
// buffer of a frame's size at the start of a page, where a frame's payload
// lands 14 bytes ahead of its source: the worst case. A buffer that begins
// 192 bytes before the end of a page is behind all of them, and keeps the
// other copies of a frame (to and from the page cache at multiples of
// 512 bytes, into a socket buffer for a reply) clear too.
// examples/aoebench at -depth 1 against examples/aoe-target shows the
// difference in the target's CPU time per frame.
const framePageOffset = 4096 - 192

// frameBuffer returns an empty buffer of capacity size that begins
// framePageOffset bytes into a page.
func frameBuffer(size int) []byte {
	b := make([]byte, size+4096)
	at := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % 4096)
	start := (framePageOffset - at + 4096) % 4096
	return b[start : start : start+size]
}
