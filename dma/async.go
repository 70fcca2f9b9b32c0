package dma

import "io"

// AsyncReaderAt is a device backend that keeps reads in flight, such as an
// NBD client (nbd.Client.StartRead). An engine streaming a transfer inline
// (Config.InlineMax) from one starts the read of every chunk the FIFO has
// room for before it moves the first, then waits for each in turn and
// moves it to the host while the later ones are on their way: the two
// sides of the FIFO overlap, the device's latency behind the host side's
// copying, with no goroutine hand-off. Otherwise the engine calls its
// ReadAt.
//
// Reads go straight into the FIFO. If one fails, the chunks before it have
// reached host memory and the ones after it are waited for and dropped.
type AsyncReaderAt interface {
	io.ReaderAt
	// StartReadAt starts reading len(p) bytes at off into p, which
	// belongs to the read until WaitRead has returned for it.
	StartReadAt(p []byte, off int64) error
	// WaitRead waits for the oldest read started and not yet waited for
	// and returns its error; the read must have filled all of p to
	// succeed.
	WaitRead() error
}

// AsyncWriterAt is a device backend that keeps writes in flight, such as
// an NBD client (nbd.Client.StartWrite). An engine streaming a transfer
// inline (Config.InlineMax) to one starts the write of each chunk as soon
// as the chunk is in the FIFO, and moves the next chunk from the host while
// it goes on; it waits for the writes, in order, once the FIFO has no room
// left in one piece or the transfer's data is all in it.
//
// If a write fails, the transfer fails; writes started after it may have
// reached the device, as the later parts of a failed write on any disk
// may have.
type AsyncWriterAt interface {
	io.WriterAt
	// StartWriteAt starts writing p at off; p must not change, and
	// belongs to the write, until WaitWrite has returned for it.
	StartWriteAt(p []byte, off int64) error
	// WaitWrite waits for the oldest write started and not yet waited
	// for and returns its error.
	WaitWrite() error
}
