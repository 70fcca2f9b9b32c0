package bridge

import (
	"errors"
	"math"

	"github.com/nhdkit/nhd/ata"
)

// errLent reports a PeekAt or ReserveAt while a buffer is lent, a release
// or commit of a buffer not lent, or a commit of more than was reserved or
// of part of a sector.
var errLent = errors.New("bridge: Ahead's lent buffer misused")

// PeekAt lends the buffer that holds the first bytes of the n at off, up
// to the end of off's block (dma.PeekReaderAt): the read-ahead's block
// (waiting for its request if it is still in flight), or, when the block is
// not there or its read-ahead failed, a buffer read on demand. It first
// waits for every write behind, and starts the read-ahead of the Depth
// blocks after off's before it returns, so the back end works while the
// caller copies. It returns a failed write behind's error, as ReadAt, or
// the on-demand read's own. The buffer is the caller's to read until
// ReleasePeek; no other call of the Ahead may come in between.
func (a *Ahead) PeekAt(off int64, n int) ([]byte, error) {
	if a.lent >= 0 || n <= 0 {
		return nil, errLent
	}
	a.waitWrites(a.ctx, 0, math.MaxInt64)
	if err := a.deferred(); err != nil {
		return nil, err
	}
	blk := off / a.block * a.block
	stop := min(blk+a.block, off+int64(n))
	i := a.find(blk)
	if i >= 0 {
		s := &a.slots[i]
		if s.state == slotReading {
			a.wait(a.ctx, i)
		}
		if s.err != nil || stop-blk > int64(s.n) {
			// The read-ahead failed (or is short): read on demand, so that
			// an error is this range's own, at its own offset.
			s.state, s.err = slotFree, nil
			i = -1
		}
	}
	// A block read whole on demand is kept too, as read-ahead would be.
	a.keep = i >= 0 || off == blk && stop == blk+a.block
	if i < 0 {
		i = a.claim()
		a.start(i, false, off, int(stop-off))
		if s := &a.slots[i]; s.state == slotReading {
			a.wait(a.ctx, i)
		}
		if s := &a.slots[i]; s.err != nil {
			err := s.err
			s.state, s.err = slotFree, nil
			if at := failedAt(s, err); at != off {
				// A plain read that stopped part way: the device takes a
				// failed loan's LBA from its start unless told otherwise.
				err = &ata.OffsetError{Off: at, Err: err}
			}
			return nil, err
		}
	}
	s := &a.slots[i]
	s.state, a.lent, a.lentWrite = slotLent, i, false
	a.readAhead(blk)
	return s.buf[off-s.off : stop-s.off], nil
}

// ReleasePeek ends the loan of the buffer PeekAt returned. A read-ahead's
// block stays, for a later read of it; a buffer read on demand is free.
func (a *Ahead) ReleasePeek() {
	if a.lent < 0 || a.lentWrite {
		return
	}
	s := &a.slots[a.lent]
	a.lent = -1
	s.state = slotFree
	if a.keep {
		s.state = slotRead
	}
}

// claim returns a free slot, waiting for the oldest request in flight
// while there is none (there is one once it is done: at most one slot is
// lent).
func (a *Ahead) claim() int {
	for {
		if i := a.free(); i >= 0 {
			return i
		}
		_, oldest := a.inFlight()
		a.wait(a.ctx, oldest)
	}
}

// ReserveAt lends a buffer for the first bytes of the n at off, at most
// Block (dma.ReserveWriterAt): as WriteAt, it first drops the read-ahead
// the range overlaps, waits for the writes behind that overlap it and for
// a request to end while Depth are in flight, and returns a failed write
// behind's error. The buffer is the caller's to fill until CommitReserved;
// no other call of the Ahead may come in between.
func (a *Ahead) ReserveAt(off int64, n int) ([]byte, error) {
	if a.lent >= 0 || n <= 0 {
		return nil, errLent
	}
	if err := a.deferred(); err != nil {
		return nil, err
	}
	stop := off + min(a.block, int64(n))
	a.drop(func(s *slot) bool { return overlaps(s, off, stop) })
	a.waitWrites(a.ctx, off, stop)
	for k, oldest := a.inFlight(); k >= a.depth; k, oldest = a.inFlight() {
		a.wait(a.ctx, oldest)
	}
	if err := a.deferred(); err != nil {
		return nil, err
	}
	i := a.free()
	s := &a.slots[i]
	s.state, s.off, s.n, s.err = slotLent, off, int(stop-off), nil
	a.lent, a.lentWrite = i, true
	return s.buf[:s.n], nil
}

// CommitReserved starts writing the first m bytes of the buffer ReserveAt
// lent, at its offset, and ends the loan; m is 0 (nothing is written) or a
// whole number of 512-byte sectors up to the buffer's length. As with
// WriteAt, the write goes on behind and its error is reported by a later
// call.
func (a *Ahead) CommitReserved(m int) error {
	if a.lent < 0 || !a.lentWrite {
		return errLent
	}
	i := a.lent
	s := &a.slots[i]
	a.lent = -1
	if m <= 0 || m > s.n || m%512 != 0 {
		s.state = slotFree
		if m == 0 {
			return nil
		}
		return errLent
	}
	a.start(i, true, s.off, m)
	return nil
}
