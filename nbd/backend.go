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

// PageSize is the size of the pages a PageTaker takes over.
const PageSize = 64 << 10

// LentPiece is one piece of a Lender's loan: Data views the backend's own
// memory (read-only), or is nil for Len bytes that read as zeroes (a
// hole). Len is len(Data) when Data is not nil.
type LentPiece struct {
	Data []byte
	Len  int
}

// Lender is a Backend whose bytes live in its own memory and can be lent
// for a read reply, so the server writes the reply to the socket straight
// from that memory, with no copy before the kernel's.
//
// Lend appends to pieces, in order, the pieces that make up [off, off+n)
// (a range inside the backend, n > 0) and returns the extended slice. The
// loan lasts until GiveBack(off, n) with the same range: until then the
// bytes each piece shows must not change, whatever is written, trimmed or
// zeroed meanwhile (a write to lent memory lands in a copy instead), and
// holes must read as zeroes at the time of the loan. Both methods are
// called from many goroutines at once, and loans may overlap; the server
// keeps the pieces only until GiveBack. The server uses Lend for reads on
// a socket (not through TLS, where the bytes are copied into records
// anyway) and ReadAt elsewhere: both must show the same bytes.
//
// A type that embeds a Lender (or a PageTaker) and changes what ReadAt
// returns (or how WriteAt writes) must not promote Lend (or TakePage): the
// server would go around its methods.
//
// MemDisk is a Lender. FileDisk is not: its bytes live in the kernel's
// page cache, which a process reaches only by copying (pread) or through
// a shared mapping that a concurrent write would change under a reply
// being sent; its zero-copy path would be sendfile(2) or splice(2).
type Lender interface {
	Lend(off, n int64, pieces []LentPiece) []LentPiece
	GiveBack(off, n int64)
}

// PageTaker is a Backend that keeps a whole page written to it instead of
// copying it: TakePage makes p the backend's bytes [off, off+PageSize),
// off a multiple of PageSize, and returns the page it replaced for the
// caller to reuse (nil when there is none to give, as on a first write or
// while the old page is lent). It reports false, changing nothing, when
// it cannot take this page (the range is cut by the end of the backend);
// the caller then writes p with WriteAt. After a true return the caller
// gives up p and owns the returned page. It is called from many
// goroutines at once. The server reads a write of whole, aligned pages
// into pages of its own and hands each over in order, so the payload is
// copied once (from the socket), not twice. MemDisk is a PageTaker.
type PageTaker interface {
	TakePage(p *[PageSize]byte, off int64) (old *[PageSize]byte, ok bool)
}

// BlockSizer is a Backend that states its block size constraints, as the
// INFO_BLOCK_SIZE reply of proto.md does: minimum is the granularity of
// every offset and length (a power of two, 1 when any byte is
// addressable), preferred the size below which writes cost a
// read-modify-write, and maxPayload the largest single ReadAt or WriteAt
// it serves well (math.MaxUint32 for no limit). A copy loop (Copy) sizes
// its requests from them. *Client reports the constraints it obeys,
// MemDisk and FileDisk their own. BlockSize must be safe for concurrent
// use and return the same values on every call.
type BlockSizer interface {
	BlockSize() (minimum, preferred, maxPayload uint32)
}

// MaxRequestLength is the longest range one NBD request covers: the length
// field of a request is 32 bits (proto.md, "Request message").
//
// Ranges longer than that, for Trim, WriteZeroes and Cache: a Server never
// passes its Trimmer, Zeroer or Cacher more than MaxRequestLength bytes
// in one call, since no request carries more. A *Client given a longer
// range (or any range over 1 GiB) splits it: Trim, TrimFlags and
// WriteZeroes into requests of at most 1 GiB, Cache into requests of at
// most its maximum payload (BlockSize), each aligned to the minimum block,
// sent one after another in order; the first that fails ends the call
// with its error, and the parts after it are not sent (the parts before it
// are done). BlockStatus describes at most 1 GiB per call, as
// BlockStatuser allows; WalkExtents asks again for the rest.
// TestClientRangesOver4GiB shows each.
const MaxRequestLength = 1<<32 - 1
