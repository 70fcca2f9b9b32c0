package ata

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// AsyncReaderAt is the optional interface of a Backend that keeps reads in
// flight, each named by a handle (an *nbd.Client is one). It has the
// method set of package dma's AsyncReaderAt (dma.Handle is an alias of
// uint64), so a backend written for one is the other, and neither package
// imports the other. NewDevice finds it once; the device then hands its
// DMA engine a view of the backend that has these methods too, so an
// engine that keeps reads in flight (a dma.Engine streaming inline) does.
//
// The contract is dma.AsyncReaderAt's: every handle StartReadAt returns
// with a nil error is waited for exactly once, in any order; p belongs to
// the request until its Wait returns; a read succeeds only if it filled p;
// Wait of a handle not in flight returns an error at once; ctx bounds the
// call it is given. The device starts and waits from the goroutine running
// the command.
//
// A failed request reports no position within p: the device puts the LBA
// of the request's first sector in the LBA registers, unless the error
// carries an *OffsetError.
type AsyncReaderAt interface {
	io.ReaderAt
	StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error)
	Wait(ctx context.Context, h uint64) error
}

// AsyncWriterAt is the optional interface of a Backend that keeps writes
// in flight, with the method set of package dma's AsyncWriterAt; see
// AsyncReaderAt. p must not change until the request's Wait returns.
type AsyncWriterAt interface {
	io.WriterAt
	StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error)
	Wait(ctx context.Context, h uint64) error
}

// OffsetError is a backend error that says where the failure is, when
// that is not where the call that returns it starts (or, for a short read
// or write, ends): a request in flight that failed part way, or a
// write-behind cache reporting, on a later command, a write it had
// accepted and then failed to complete. The device finds it anywhere in
// the error's chain (errors.As) and reports the sector at Off in the LBA
// registers: the command ends in UNC for a read, DF|ERR with ABRT for a
// write or a flush (FLUSH CACHE reports the LBA of the write that failed).
type OffsetError struct {
	Off int64 // byte offset of the failure on the backend
	Err error
}

func (e *OffsetError) Error() string {
	return fmt.Sprintf("ata: backend failed at byte %d: %v", e.Off, e.Err)
}

// Unwrap returns e.Err.
func (e *OffsetError) Unwrap() error { return e.Err }

// errOffset returns the offset an *OffsetError in err's chain names.
func errOffset(err error) (int64, bool) {
	var oe *OffsetError
	if errors.As(err, &oe) {
		return oe.Off, true
	}
	return 0, false
}

// errHandle reports a Wait for a handle the device's view of the backend
// does not have in flight: a bug of the DMA engine.
var errHandle = errors.New("ata: DMA engine waited for a request not in flight")

// errLeftInFlight reports a DMA engine that returned with requests it had
// started and not waited for.
var errLeftInFlight = errors.New("ata: DMA engine left backend requests in flight")

// asyncReq is one request in flight through the tracker: the backend's
// handle for it and where it starts.
type asyncReq struct {
	h     uint64 // the backend's handle
	off   int64
	gen   uint32 // bumped by each request that uses the entry
	live  bool
	write bool
}

// The tracker's own handles: the entry's generation in the high 32 bits,
// its index plus one in the low 32 (so 0 is never a handle).
func reqHandle(i int, gen uint32) uint64 { return uint64(gen)<<32 | uint64(i+1) }

// start starts a read or write of p at off on the backend and returns the
// tracker's handle for it. The entry table grows to the most requests ever
// in flight at once and is reused: no allocation in steady state.
func (t *tracker) start(ctx context.Context, p []byte, off int64, write bool) (uint64, error) {
	if !t.inside(p, off) {
		t.outside = true
		return 0, ErrOutsideTransfer
	}
	var i int
	if n := len(t.free); n > 0 {
		i, t.free = int(t.free[n-1]), t.free[:n-1]
	} else {
		t.reqs = append(t.reqs, asyncReq{})
		i = len(t.reqs) - 1
	}
	var h uint64
	var err error
	if write {
		h, err = t.aw.StartWriteAt(ctx, p, off)
	} else {
		h, err = t.ar.StartReadAt(ctx, p, off)
	}
	if err != nil {
		t.free = append(t.free, int32(i))
		t.fail(off, err)
		return 0, err
	}
	r := &t.reqs[i]
	r.gen++
	r.h, r.off, r.live, r.write = h, off, true, write
	t.live++
	return reqHandle(i, r.gen), nil
}

// wait waits for the request h names.
func (t *tracker) wait(ctx context.Context, h uint64) error {
	i := int(uint32(h)) - 1
	if i < 0 || i >= len(t.reqs) || !t.reqs[i].live || t.reqs[i].gen != uint32(h>>32) {
		return errHandle
	}
	r := &t.reqs[i]
	r.live = false
	t.live--
	t.free = append(t.free, int32(i))
	var err error
	if r.write {
		err = t.aw.Wait(ctx, r.h)
	} else {
		err = t.ar.Wait(ctx, r.h)
	}
	if err != nil {
		t.fail(r.off, err)
	}
	return err
}

// drain waits for the requests an engine left in flight, so that the
// backend frees them, gives back a buffer it left lent (endLoan), and
// reports whether there were any.
func (t *tracker) drain(ctx context.Context) bool {
	lent := t.endLoan()
	if t.live == 0 {
		return lent
	}
	for i := range t.reqs {
		if r := &t.reqs[i]; r.live {
			_ = t.wait(ctx, reqHandle(i, r.gen))
		}
	}
	return true
}

// asyncReader is the device's view of a backend with AsyncReaderAt, for
// a DMA engine's read: the tracker's checks and bookkeeping, and the
// backend's requests in flight.
type asyncReader struct{ *tracker }

func (a asyncReader) StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return a.start(ctx, p, off, false)
}

func (a asyncReader) Wait(ctx context.Context, h uint64) error { return a.wait(ctx, h) }

// asyncWriter is asyncReader for writes (AsyncWriterAt).
type asyncWriter struct{ *tracker }

func (a asyncWriter) StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return a.start(ctx, p, off, true)
}

func (a asyncWriter) Wait(ctx context.Context, h uint64) error { return a.wait(ctx, h) }
