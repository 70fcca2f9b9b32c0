package nbd

import (
	"context"
	"io"
)

// Backend is the storage behind an export of the Server: an io.ReaderAt and
// io.WriterAt over Size bytes. The server calls ReadAt and WriteAt from many
// goroutines at once (one per request in flight), so a Backend must be safe
// for concurrent use; overlapping requests may run in any order, as on any
// NBD server. Implementations must not retain the slices they are given.
// ReadAt must fill p completely or return an error (a short read at the end
// of a well-formed request is an error: the server checks bounds first).
//
// The optional interfaces below are found by type assertion; an export
// advertises a feature only when its Backend has the method. *Client
// implements Backend and every optional interface, so an NBD client can be
// exported again (a proxy).
type Backend interface {
	io.ReaderAt
	io.WriterAt
	Size() int64
}

// Flusher is a Backend that can make completed writes durable. A server
// advertises ExportSendFlush and ExportSendFUA for it and implements FUA as
// a write followed by Flush unless the Backend is also a FUAWriter.
type Flusher interface {
	Flush(ctx context.Context) error
}

// FUAWriter is a Backend that writes durably in one step (NBD_CMD_FLAG_FUA).
type FUAWriter interface {
	WriteAtFUA(p []byte, off int64) (n int, err error)
}

// Trimmer is a Backend that can discard a range (NBD_CMD_TRIM). After a
// trim the range's content is unspecified until written again.
type Trimmer interface {
	Trim(ctx context.Context, off, length int64) error
}

// Zeroer is a Backend that can write zeroes without a payload
// (NBD_CMD_WRITE_ZEROES). flags may hold FlagNoHole (the range must stay
// allocated) and FlagFastZero (return ENOTSUP at once unless zeroing is
// faster than writing zeroes). Without a Zeroer the server writes a
// buffer of zeroes.
type Zeroer interface {
	WriteZeroes(ctx context.Context, off, length int64, flags CmdFlags) error
}

// BlockStatuser is a Backend that reports allocation (the base:allocation
// context). BlockStatus appends to dst extents that describe the bytes from
// off on, contiguously, covering at least one byte and at most length bytes
// (it may describe fewer bytes than length), and returns the extended slice.
type BlockStatuser interface {
	BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error)
}

// Cacher is a Backend that can prefetch a range (NBD_CMD_CACHE).
type Cacher interface {
	Cache(ctx context.Context, off, length int64) error
}
