package ata

import (
	"context"
	"errors"
	"io"
)

// PeekReaderAt is the optional interface of a Backend that holds read data
// in buffers of its own and lends them (a read-ahead cache, such as
// bridge.Ahead), with the method set of package dma's PeekReaderAt: a DMA
// engine then copies each byte once, from the backend's buffer straight
// into host memory. NewDevice finds it once; the device then hands its DMA
// engine a view of the backend that has these methods too, checked
// against the transfer's range, and that records where a PeekAt failed.
//
// The contract is dma.PeekReaderAt's: PeekAt(off, n) lends a buffer
// holding the first bytes (whole sectors, at most n) at off, until
// ReleasePeek; one loan at a time, and no other call meanwhile; a failed
// PeekAt lends nothing. A failed PeekAt ends the command in UNC with the
// LBA of off, or of the offset an *OffsetError in its chain names (a
// read-ahead's error reaches the command that needs its data, with that
// data's LBA).
type PeekReaderAt interface {
	io.ReaderAt
	PeekAt(off int64, n int) ([]byte, error)
	ReleasePeek()
}

// ReserveWriterAt is the optional interface of a Backend that takes
// written data into buffers of its own and lends them (a write-behind
// cache, such as bridge.Ahead), with the method set of package dma's
// ReserveWriterAt; see PeekReaderAt. ReserveAt(off, n) lends a buffer for
// the first bytes (whole sectors, at most n) at off; CommitReserved(m)
// writes its first m bytes and ends the loan. A failed ReserveAt or
// CommitReserved ends the command in DF|ERR with ABRT, with the LBA of the
// reserved offset or of the offset an *OffsetError in its chain names (a
// write behind that failed, reported late).
type ReserveWriterAt interface {
	io.WriterAt
	ReserveAt(off int64, n int) ([]byte, error)
	CommitReserved(m int) error
}

// loan is what the tracker has lent the engine from the backend.
type loan uint8

const (
	loanNone loan = iota
	loanPeek
	loanReserve
)

// errLoan reports a DMA engine that released or committed a buffer it did
// not hold, or asked for a second one while it held one: a bug of the
// engine.
var errLoan = errors.New("ata: DMA engine misused a buffer lent by the backend")

// peekAt lends the engine the backend's buffer for the first bytes of the
// n at off, inside the current transfer.
func (t *tracker) peekAt(off int64, n int) ([]byte, error) {
	if t.loan != loanNone {
		return nil, errLoan
	}
	if !t.within(off, int64(n)) {
		t.outside = true
		return nil, ErrOutsideTransfer
	}
	p, err := t.pr.PeekAt(off, n)
	if err != nil {
		t.fail(off, err)
		return nil, err
	}
	t.loan, t.loanOff = loanPeek, off
	return p, nil
}

func (t *tracker) releasePeek() {
	if t.loan == loanPeek {
		t.loan = loanNone
		t.pr.ReleasePeek()
	}
}

// reserveAt lends the engine the backend's buffer for the first bytes of
// the n at off, inside the current transfer.
func (t *tracker) reserveAt(off int64, n int) ([]byte, error) {
	if t.loan != loanNone {
		return nil, errLoan
	}
	if !t.within(off, int64(n)) {
		t.outside = true
		return nil, ErrOutsideTransfer
	}
	p, err := t.rw.ReserveAt(off, n)
	if err != nil {
		t.fail(off, err)
		return nil, err
	}
	t.loan, t.loanOff = loanReserve, off
	return p, nil
}

func (t *tracker) commitReserved(m int) error {
	if t.loan != loanReserve {
		return errLoan
	}
	t.loan = loanNone
	err := t.rw.CommitReserved(m)
	if err != nil {
		t.fail(t.loanOff, err)
	}
	return err
}

// endLoan gives back a buffer the engine left lent (a read's released, a
// write's committed empty) and reports whether there was one.
func (t *tracker) endLoan() bool {
	switch t.loan {
	case loanPeek:
		t.releasePeek()
	case loanReserve:
		_ = t.commitReserved(0)
	default:
		return false
	}
	return true
}

// The device's views of a backend with PeekReaderAt (ReserveWriterAt),
// alone or with AsyncReaderAt (AsyncWriterAt): the tracker's checks and
// bookkeeping, and the backend's loans.
type (
	peekReader      struct{ *tracker }
	asyncPeekReader struct{ *tracker }
	reserveWriter   struct{ *tracker }
	asyncResWriter  struct{ *tracker }
)

func (v peekReader) PeekAt(off int64, n int) ([]byte, error) { return v.peekAt(off, n) }
func (v peekReader) ReleasePeek()                            { v.releasePeek() }

func (v asyncPeekReader) PeekAt(off int64, n int) ([]byte, error) { return v.peekAt(off, n) }
func (v asyncPeekReader) ReleasePeek()                            { v.releasePeek() }
func (v asyncPeekReader) StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return v.start(ctx, p, off, false)
}
func (v asyncPeekReader) Wait(ctx context.Context, h uint64) error { return v.wait(ctx, h) }

func (v reserveWriter) ReserveAt(off int64, n int) ([]byte, error) { return v.reserveAt(off, n) }
func (v reserveWriter) CommitReserved(m int) error                 { return v.commitReserved(m) }

func (v asyncResWriter) ReserveAt(off int64, n int) ([]byte, error) { return v.reserveAt(off, n) }
func (v asyncResWriter) CommitReserved(m int) error                 { return v.commitReserved(m) }
func (v asyncResWriter) StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	return v.start(ctx, p, off, true)
}
func (v asyncResWriter) Wait(ctx context.Context, h uint64) error { return v.wait(ctx, h) }
