package dma

import "io"

// PeekReaderAt is a device backend that holds read data in buffers of its
// own, a cache for instance, and lends them: a streaming engine reading
// from one copies the data straight from the backend's buffer into host
// memory (through its tap), rather than having ReadAt copy it into the
// FIFO first. Each byte is then copied once between the backend's memory
// and the host's.
//
// PeekAt(off, n) returns a buffer holding the first bytes of the n at
// off: at least one sector and at most n bytes, a multiple of SectorSize
// (the engine asks again for the rest at off+len(p)). It may block, as
// ReadAt would, until the data is there; it bounds its own waits, as
// ReadAt does. The buffer is lent until ReleasePeek: the caller only
// reads it, and the backend neither changes nor reuses it meanwhile.
// ReleasePeek ends the loan; the caller keeps no reference to the buffer
// after it.
//
//   - One loan at a time: the caller releases each buffer before the next
//     PeekAt and before any other call of the backend. A PeekAt while a
//     buffer is lent is an error.
//   - Errors: a failed PeekAt lends nothing (no ReleasePeek follows) and
//     says why, as ReadAt would (an *ata.OffsetError in the chain names
//     the failing offset, else the failure is taken to be at off). A
//     backend that reads ahead returns a read-ahead's error only from the
//     PeekAt that needs its data.
//   - A partial transfer: the caller may stop after any loan (its tap or
//     host memory failed); what it peeked before stays read, nothing is
//     undone.
//   - Concurrency is the implementation's to state; the engine calls
//     PeekAt and ReleasePeek from one goroutine, the one running the
//     transfer.
//
// An Engine uses PeekAt instead of ReadAt for every Streaming transfer,
// inline or not (it runs on the calling goroutine: there is no backend
// I/O to overlap with the copy); StoreAndForward keeps its FIFO.
type PeekReaderAt interface {
	io.ReaderAt
	// PeekAt lends a buffer holding the first bytes of the n at off.
	PeekAt(off int64, n int) ([]byte, error)
	// ReleasePeek ends the loan of the buffer the last PeekAt returned.
	ReleasePeek()
}

// ReserveWriterAt is a device backend that takes written data into
// buffers of its own, a write-behind cache for instance, and lends them: a
// streaming engine writing to one copies host memory (through its tap)
// straight into the backend's buffer, then commits it, rather than having
// WriteAt copy it out of the FIFO. Each byte is then copied once between
// the host's memory and the backend's.
//
// ReserveAt(off, n) returns a buffer for the first bytes of the n at off:
// at least one sector and at most n bytes, a multiple of SectorSize (the
// engine reserves again for the rest at off+len(p)). It may block, as
// WriteAt would, until a buffer is free; it bounds its own waits, as
// WriteAt does. The buffer is lent until CommitReserved: the caller fills
// it, and the backend neither reads nor reuses it meanwhile.
// CommitReserved(m) ends the loan and writes the buffer's first m bytes at
// off (m is a multiple of SectorSize, 0 to len(p); 0 writes nothing); the
// caller keeps no reference to the buffer after it. Its error is the
// write's, as WriteAt's would be: a backend that writes behind may
// return it later, from another call, as an *ata.OffsetError naming the
// write's offset.
//
//   - One loan at a time: the caller commits each buffer before the next
//     ReserveAt and before any other call of the backend. A ReserveAt
//     while a buffer is lent is an error.
//   - Errors: a failed ReserveAt lends nothing (no CommitReserved
//     follows); its error may be an earlier write's, reported late (an
//     *ata.OffsetError in the chain names its offset, else the failure is
//     taken to be at off).
//   - A partial transfer: the caller may stop after any loan (its tap or
//     host memory failed); it then commits only the sectors it filled (m
//     < len(p)), or none, as a disk writes the sectors before a failure.
//   - Concurrency is the implementation's to state; the engine calls
//     ReserveAt and CommitReserved from one goroutine, the one running the
//     transfer.
//
// An Engine uses ReserveAt instead of WriteAt for every Streaming
// transfer, as PeekReaderAt.
type ReserveWriterAt interface {
	io.WriterAt
	// ReserveAt lends a buffer for the first bytes of the n at off.
	ReserveAt(off int64, n int) ([]byte, error)
	// CommitReserved writes the first m bytes of the lent buffer at its
	// offset and ends the loan.
	CommitReserved(m int) error
}
