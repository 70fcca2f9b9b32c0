package dma

import (
	"context"
	"io"
)

// Handle names one request an asynchronous backend started (an alias, so
// packages that do not import dma can implement the interfaces).
type Handle = uint64

// AsyncReaderAt is a device backend that keeps reads in flight, such as an
// NBD client (*nbd.Client). An engine streaming a transfer inline
// (Config.InlineMax) from one starts the read of every chunk the FIFO has
// room for before it moves the first, then waits for each by its handle
// and moves it to the host while the later ones are on their way: the two
// sides of the FIFO overlap, the device's latency behind the host side's
// copying, with no goroutine hand-off. Otherwise the engine calls its
// ReadAt.
//
// Reads go straight into the FIFO. If one fails, the chunks before it have
// reached host memory and the ones after it are waited for and dropped.
//
// The contract, for StartReadAt and Wait:
//
//   - Every handle StartReadAt returned with a nil error is waited for
//     exactly once, in any order; a failed StartReadAt returns no handle
//     to wait for.
//   - p belongs to the request from StartReadAt until its Wait returns:
//     the caller neither reads nor changes it before then, and the
//     implementation does not touch it after.
//   - Wait returns nil only if the read filled all of p.
//   - Wait of a handle that was never started, or was already waited for,
//     returns an error at once: it never panics and never blocks forever.
//   - ctx bounds the call it is given: StartReadAt's the start of the
//     request (a free slot, the write of the request), Wait's the wait for
//     its end. A Wait whose ctx ends returns ctx's error and the handle is
//     spent (the request is abandoned: nothing is written into p after
//     Wait returns).
//   - Concurrency is the implementation's to state; the engine calls
//     StartReadAt and Wait from one goroutine at a time. *nbd.Client is
//     safe for concurrent use.
type AsyncReaderAt interface {
	io.ReaderAt
	// StartReadAt starts reading len(p) bytes at off into p and returns
	// the request's handle.
	StartReadAt(ctx context.Context, p []byte, off int64) (Handle, error)
	// Wait waits for the request h and returns its error.
	Wait(ctx context.Context, h Handle) error
}

// AsyncWriterAt is a device backend that keeps writes in flight, such as
// an NBD client (*nbd.Client). An engine streaming a transfer inline
// (Config.InlineMax) to one starts the write of each chunk as soon as the
// chunk is in the FIFO, and moves the next chunk from the host while it
// goes on; it waits for the writes, each by its handle, once the FIFO has
// no room left in one piece or the transfer's data is all in it.
//
// If a write fails, the transfer fails; writes started after it may have
// reached the device, as the later parts of a failed write on any disk
// may have.
//
// The contract is AsyncReaderAt's, with StartWriteAt for StartReadAt, and
// p must not change while it belongs to the request; Wait returns nil
// only if all of p was written.
type AsyncWriterAt interface {
	io.WriterAt
	// StartWriteAt starts writing p at off and returns the request's
	// handle.
	StartWriteAt(ctx context.Context, p []byte, off int64) (Handle, error)
	// Wait waits for the request h and returns its error.
	Wait(ctx context.Context, h Handle) error
}
