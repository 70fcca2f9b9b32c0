package ata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Backend is where the device keeps its sectors: sector n of the device is
// bytes [n·size, (n+1)·size) of the backend, with size the logical sector
// size. An *os.File, a memory disk and the nbd client all fit as they are.
//
// The device issues at most one call at a time per Device; several Devices
// on one backend (a bridge running commands in parallel) issue concurrent
// ReadAt and WriteAt calls on disjoint or overlapping ranges, which the
// io.ReaderAt and io.WriterAt contracts allow. Implementations must not
// retain the slices they are given.
//
// Optional methods, found by type assertion once, in NewDevice:
//
//	Flush(ctx context.Context) error                   // FLUSH CACHE, FUA, write-through
//	Sync() error                                       // the same for an *os.File
//	Trim(ctx context.Context, off, length int64) error // DATA SET MANAGEMENT TRIM
//	Size() int64                                       // checked against DeviceInfo.Sectors
//	Stat() (os.FileInfo, error)                        // likewise, for a regular file
//	StartReadAt, Wait                                  // AsyncReaderAt: reads in flight, for the DMA engine
//	StartWriteAt, Wait                                 // AsyncWriterAt: writes in flight, likewise
//	PeekAt, ReleasePeek                                // PeekReaderAt: reads from the backend's own buffers
//	ReserveAt, CommitReserved                          // ReserveWriterAt: writes into them
//
// A backend with neither Flush nor Sync is taken to be write-through: the
// flushes succeed at once. Without Trim, NewDevice refuses
// DeviceInfo.TRIM (ErrNoTrim).
//
// Errors: a failed read ends the command in UNC, a failed write or flush in
// DF|ERR with ABRT, with the LBA of the first sector that failed in the LBA
// registers: where a short ReadAt or WriteAt stopped, where a failed
// asynchronous request or loan (PeekAt, ReserveAt, CommitReserved)
// started, or where an *OffsetError in the error's chain says.
type Backend interface {
	io.ReaderAt
	io.WriterAt
}

// Flusher is the optional flush method of a Backend (the nbd client has it).
type Flusher interface {
	Flush(ctx context.Context) error
}

// Syncer is the optional flush method of an *os.File.
type Syncer interface {
	Sync() error
}

// Trimmer is the optional discard method of a Backend (the nbd client and
// memory disk have it). length is a multiple of the logical sector size.
type Trimmer interface {
	Trim(ctx context.Context, off, length int64) error
}

// Sizer reports the size of a Backend in bytes.
type Sizer interface {
	Size() int64
}

// tracker wraps the backend for one Device and records where the first
// failing call failed, so that a failing DMA transfer (the engine returns
// only the error) still reports the failing LBA. It lives inside the
// Device: handing &d.track, or a view of it with the backend's optional
// interfaces (views), to an engine allocates nothing.
type tracker struct {
	b       Backend
	ar      AsyncReaderAt   // the backend's, or nil
	aw      AsyncWriterAt   // the backend's, or nil
	pr      PeekReaderAt    // the backend's, or nil
	rw      ReserveWriterAt // the backend's, or nil
	loan    loan            // a buffer of the backend's the engine holds
	loanOff int64           // and its offset
	lo, hi  int64           // the byte range of the current transfer
	failed  bool
	off     int64 // the lowest failing byte
	err     error // its error
	outside bool  // a call outside [lo, hi) was refused

	reqs []asyncReq // requests in flight and free entries, by handle
	free []int32    // indexes of the free entries of reqs
	live int        // requests in flight
}

// views sets the tracker over b and returns the views of it a DMA engine
// is handed: each has, besides ReadAt (WriteAt), the backend's optional
// interfaces for its direction (AsyncReaderAt, PeekReaderAt; AsyncWriterAt,
// ReserveWriterAt), and only those.
func (t *tracker) views(b Backend) (io.ReaderAt, io.WriterAt) {
	t.b = b
	t.ar, _ = b.(AsyncReaderAt)
	t.aw, _ = b.(AsyncWriterAt)
	t.pr, _ = b.(PeekReaderAt)
	t.rw, _ = b.(ReserveWriterAt)
	var src io.ReaderAt = t
	switch {
	case t.ar != nil && t.pr != nil:
		src = asyncPeekReader{t}
	case t.ar != nil:
		src = asyncReader{t}
	case t.pr != nil:
		src = peekReader{t}
	}
	var dst io.WriterAt = t
	switch {
	case t.aw != nil && t.rw != nil:
		dst = asyncResWriter{t}
	case t.aw != nil:
		dst = asyncWriter{t}
	case t.rw != nil:
		dst = reserveWriter{t}
	}
	return src, dst
}

// reset starts a transfer of [lo, hi): calls outside it fail with
// ErrOutsideTransfer and never reach the backend.
func (t *tracker) reset(lo, hi int64) {
	t.lo, t.hi = lo, hi
	t.failed, t.off, t.err, t.outside = false, 0, nil, false
}

// backendFailed reports whether err, which a transfer returned, is (or
// wraps) the backend's failure the tracker recorded, rather than an error
// of the engine's own.
func (t *tracker) backendFailed(err error) bool {
	return t.failed && !t.outside && errors.Is(err, t.err)
}

func (t *tracker) inside(p []byte, off int64) bool { return t.within(off, int64(len(p))) }

// within reports whether the n bytes at off lie inside the current
// transfer.
func (t *tracker) within(off, n int64) bool {
	return off >= t.lo && off <= t.hi && n >= 0 && n <= t.hi-off
}

// fail records a failure of the backend at off, or at the offset an
// *OffsetError in err names; of several, the lowest offset is the
// transfer's.
func (t *tracker) fail(off int64, err error) {
	if o, ok := errOffset(err); ok {
		off = o
	}
	if !t.failed || off < t.off {
		t.failed, t.off, t.err = true, off, err
	}
}

// ReadAt reads from the backend inside the current transfer. A full read that also reports io.EOF (the
// end of the backend) is a success.
func (t *tracker) ReadAt(p []byte, off int64) (int, error) {
	if !t.inside(p, off) {
		t.outside = true
		return 0, ErrOutsideTransfer
	}
	n, err := t.b.ReadAt(p, off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		t.fail(off+int64(n), err)
	}
	return n, err
}

// WriteAt writes to the backend inside the current transfer.
func (t *tracker) WriteAt(p []byte, off int64) (int, error) {
	if !t.inside(p, off) {
		t.outside = true
		return 0, ErrOutsideTransfer
	}
	n, err := t.b.WriteAt(p, off)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		t.fail(off+int64(n), err)
	}
	return n, err
}

// stater is the Stat method of an *os.File.
type stater interface {
	Stat() (os.FileInfo, error)
}

// checkSize refuses info when the backend says it holds fewer bytes than
// info.Sectors logical sectors: a Sizer's Size, or the size of a regular
// file from Stat (a block device or pipe reports no usable size, and is
// not checked).
func checkSize(b Backend, info *DeviceInfo) error {
	var size int64
	switch b := b.(type) {
	case Sizer:
		size = b.Size()
	case stater:
		fi, err := b.Stat()
		if err != nil {
			return fmt.Errorf("ata: backend Stat: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		size = fi.Size()
	default:
		return nil
	}
	need := info.Sectors * uint64(info.logical())
	if size < 0 || uint64(size) < need {
		return &infoError{fmt.Sprintf("Sectors %d of %d bytes need %d bytes; the backend holds %d",
			info.Sectors, info.logical(), need, size)}
	}
	return nil
}
