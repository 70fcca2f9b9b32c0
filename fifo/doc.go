// Package fifo implements a bounded FIFO of fixed-size blocks between one
// producer and one consumer: the software form of the sector FIFO in the NHD
// paper's FPGA, through which the DMA engine (package dma) streams data.
//
// The ring owns its memory and never allocates after New. The producer
// reserves free blocks, writes them in place and commits them; the consumer
// peeks committed blocks in place, reads them and releases them:
//
//	buf, err := f.ReserveN(ctx, 16) // up to 16 free blocks, contiguous
//	n, err := src.ReadAt(buf, off)  // fill them in place
//	err = f.Commit(len(buf) / f.BlockSize())
//
//	buf, err := f.PeekN(ctx, 16)    // committed blocks, in place
//	use(buf)
//	err = f.Release(len(buf) / f.BlockSize())
//
// The batch forms (ReserveN, PeekN) pay one handshake for many blocks; that
// is how a transfer streams at memory speed. The blocking calls honour a
// context and Close: after Close the consumer drains what was committed,
// then gets io.EOF. The Try forms never wait. Watermarks (Config.Notify)
// report the fill level crossing a low or a high mark, like the FIFO's
// interrupt line, and Stats counts blocks, bytes and stalls.
//
// A waiting side first spins, re-reading the other side's index, then
// yields, then parks on a channel; the other side wakes it only when it is
// parked, so the steady state costs two stores per handshake. On
// linux/amd64 those are release stores (plain MOVs) rather than
// sync/atomic's XCHG, which would wait for the handshake's cache lines to
// cross between cores; a side parked for longer than 200 microseconds then
// makes one membarrier(2) system call before it parks for good, the fence
// the other side skipped (internal/spin's Publish). Elsewhere, or where
// membarrier is refused, or under the race detector, the stores are
// sync/atomic's. The producer also takes the first cache line of the slot
// it will fill 16 KiB later for writing (PREFETCHW on amd64, where the
// processor has it), so that its first store into a slot the consumer read
// a lap ago does not wait for that line to come over, holding up the
// stores behind it.
package fifo
