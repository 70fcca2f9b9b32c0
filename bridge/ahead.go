package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/zerocopy"
)

// asyncBackend is a backend that keeps requests in flight from one
// goroutine, each with a handle of its own: a dma.AsyncReaderAt and
// dma.AsyncWriterAt, such as *nbd.Client.
type asyncBackend interface {
	dma.AsyncReaderAt
	dma.AsyncWriterAt
}

// AheadConfig sets up an Ahead.
type AheadConfig struct {
	// Block is the read-ahead's unit in bytes: blocks are aligned to it,
	// and a write is started in pieces of at most Block bytes. The bridge
	// uses its largest command. It must be a positive multiple of 512.
	Block int
	// Depth is how many requests are in flight at most; 0 means
	// DefaultDepth. It must not be negative.
	Depth int
	// Context bounds the waits made inside ReadAt, WriteAt, Trim, PeekAt
	// and ReserveAt; nil means context.Background(). Flush takes its own.
	Context context.Context
	// Copies, if not nil, counts the payload bytes the Ahead copies
	// between its buffers and its callers' (zerocopy.Accounting.AddCopy):
	// a ReadAt served from the read-ahead and every WriteAt. A caller that
	// borrows the buffers (PeekAt, ReserveAt) does the copy itself.
	Copies *zerocopy.Accounting
}

// Ahead is a backend that pipelines its caller with the backend it wraps
// across calls: read-ahead and write-behind, as a disk with a volatile
// write cache does.
//
//   - ReadAt serves each Block-aligned block it touches from the
//     read-ahead when that block is there (waiting for its request if it
//     is still in flight), else reads it on demand straight into p. It
//     then keeps the Depth blocks after the last one it touched being read.
//     Read-ahead of other blocks is dropped (after its request completes).
//     A read first waits for every write behind. The error of a read-ahead
//     is returned only to a call that needs its data.
//   - WriteAt copies p into a buffer of its own, starts the write and
//     returns: the write goes on while the caller works on the next one.
//     A write waits for any write behind that overlaps it, so the backend
//     sees overlapping writes in order, and drops read-ahead it overlaps.
//   - PeekAt and ReleasePeek, ReserveAt and CommitReserved
//     (dma.PeekReaderAt, dma.ReserveWriterAt) are ReadAt and WriteAt with
//     the Ahead's buffers lent to the caller, a block at a time, so that a
//     DMA engine copies straight between them and host memory: each byte
//     is copied once, where ReadAt and WriteAt copy it between p and the
//     buffers. A read on demand then goes into a buffer too. Between a
//     loan and its end the caller makes no other call of the Ahead.
//   - Flush waits for every write behind, then flushes the backend. Trim
//     waits for the requests that overlap its range, then trims it. Size
//     is the backend's. Close waits for every request in flight.
//
// A write behind that fails is reported once, by the next call of any
// method (or by Flush or Close) after its failure is seen (at once with a
// backend that has no async methods; else when the write is waited for:
// by a read, by Flush, or when its buffer is needed, at most Depth writes
// later), as an *ata.OffsetError whose Off is the failed write's offset,
// so that an ATA device reports that write's LBA. Several are reported one
// per call, in the order they were seen; Flush returns nil only once all
// are reported. A call that reports one stops there (a WriteAt returns
// the bytes whose writes it started before it).
//
// Requests stay in flight through the backend's StartReadAt,
// StartWriteAt and Wait methods (the shape of dma.AsyncReaderAt and
// dma.AsyncWriterAt) when it has them, from the caller's goroutine;
// otherwise a request is made by a plain call when it starts.
//
// Memory is bounded: Depth+1 buffers of Block bytes, allocated by
// NewAhead, none afterwards. Calls may be split at any offsets. An Ahead is
// not safe for concurrent use: one caller (one ata.Device) uses it.
type Ahead struct {
	be    ata.Backend
	async asyncBackend // be, when it keeps requests in flight
	block int64
	depth int
	size  int64
	ctx   context.Context
	cp    *zerocopy.Accounting // nil: not counted
	slots []slot
	seq   uint64  // order of the requests started
	errs  []error // writes behind that failed, not reported yet, oldest first

	lent      int  // the slot lent by PeekAt or ReserveAt, or -1
	lentWrite bool // lent by ReserveAt
	keep      bool // the slot PeekAt lent holds a whole block, kept as read-ahead after ReleasePeek
}

type slotState uint8

const (
	slotFree    slotState = iota
	slotReading           // a read in flight
	slotRead              // a read done: buf holds [off, off+n) or err
	slotWriting           // a write in flight
	slotLent              // lent by PeekAt or ReserveAt
)

// slot is a buffer and the request made with it.
type slot struct {
	buf   []byte
	off   int64
	n     int
	state slotState
	seq   uint64
	h     dma.Handle // the request's handle, with an async backend
	err   error      // the request's result when made by a plain call, or the read's
	stop  int64      // where a failed plain call stopped (the end of what it moved)
}

// ErrNoTrim is returned by Ahead.Trim when the backend cannot discard.
var ErrNoTrim = errors.New("bridge: backend cannot trim")

// ErrWriteBehind marks a write behind that failed, reported by a later
// call: the *ata.OffsetError that reports it wraps ErrWriteBehind and the
// backend's error, so errors.Is tells it from the reporting call's own
// failure (and, through a Bridge's error, from the command's own) and
// still finds the backend's errno.
var ErrWriteBehind = errors.New("bridge: write behind")

// errBlock is returned by NewAhead for a block size that is not a
// positive multiple of 512.
var errBlock = errors.New("bridge: block size must be a positive multiple of 512")

// NewAhead returns be with read-ahead and write-behind.
func NewAhead(be ata.Backend, c AheadConfig) (*Ahead, error) {
	if c.Block <= 0 || c.Block%512 != 0 {
		return nil, errors.Join(ErrConfig, errBlock)
	}
	if c.Depth < 0 {
		return nil, errors.Join(ErrConfig, errors.New("bridge: negative Ahead depth"))
	}
	if c.Depth == 0 {
		c.Depth = DefaultDepth
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	a := &Ahead{be: be, block: int64(c.Block), depth: c.Depth, size: math.MaxInt64, ctx: c.Context, cp: c.Copies,
		slots: make([]slot, c.Depth+1), errs: make([]error, 0, c.Depth+1), lent: -1}
	a.async, _ = be.(asyncBackend)
	if s, ok := be.(ata.Sizer); ok {
		a.size = s.Size()
	}
	for i := range a.slots {
		a.slots[i].buf = make([]byte, c.Block)
	}
	return a, nil
}

// Size reports the backend's size, or the largest int64 when it has no
// Size method.
func (a *Ahead) Size() int64 { return a.size }

// start makes slot i's request: sends it, or makes it now with a backend
// that cannot keep it in flight.
func (a *Ahead) start(i int, write bool, off int64, n int) {
	s := &a.slots[i]
	a.seq++
	s.off, s.n, s.seq, s.err, s.h, s.stop = off, n, a.seq, nil, 0, off
	b := s.buf[:n]
	var m int
	switch {
	case a.async != nil && write:
		s.h, s.err = a.async.StartWriteAt(a.ctx, b, off)
	case a.async != nil:
		s.h, s.err = a.async.StartReadAt(a.ctx, b, off)
	case write:
		m, s.err = a.be.WriteAt(b, off)
	default:
		m, s.err = readFull(a.be, b, off)
	}
	s.stop += int64(min(max(m, 0), n))
	s.state = slotReading
	if write {
		s.state = slotWriting
	}
	if a.async == nil || s.err != nil {
		// Made already, or never sent: its result is known now.
		s.h = 0
		a.wait(a.ctx, i)
	}
}

// readFull reads all of p at off, a full read that reports io.EOF being a
// success, and returns the bytes read.
func readFull(r io.ReaderAt, p []byte, off int64) (int, error) {
	m, err := r.ReadAt(p, off)
	if m == len(p) {
		return m, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return m, err
}

// failedAt returns the byte offset where slot s's request failed with err:
// the one an *ata.OffsetError in err's chain names, else where a plain
// call stopped, which for a request in flight (no position reported) is
// its start.
func failedAt(s *slot, err error) int64 {
	var oe *ata.OffsetError
	if errors.As(err, &oe) {
		return oe.Off
	}
	return s.stop
}

// wait waits for slot i's request. A read's slot then holds its data or
// its error; a write's is free, its error kept for the next call.
func (a *Ahead) wait(ctx context.Context, i int) {
	s := &a.slots[i]
	err := s.err
	if a.async != nil && s.h != 0 {
		// A wait that ctx ends abandons the request, which then no longer
		// touches the buffer (the dma.AsyncReaderAt contract).
		err = a.async.Wait(ctx, s.h)
	}
	s.h = 0
	if s.state == slotReading {
		s.state, s.err = slotRead, err
		return
	}
	s.state, s.err = slotFree, nil
	if err != nil {
		a.errs = append(a.errs, &ata.OffsetError{Off: failedAt(s, err), Err: fmt.Errorf("%w: %w", ErrWriteBehind, err)})
	}
}

// deferred returns and clears the error of a failed write behind.
func (a *Ahead) deferred() error {
	if len(a.errs) == 0 {
		return nil
	}
	err := a.errs[0]
	a.errs = append(a.errs[:0], a.errs[1:]...)
	return err
}

func overlaps(s *slot, off, end int64) bool { return s.off < end && off < s.off+int64(s.n) }

// waitWrites waits for the writes in flight that overlap [off, end),
// oldest first.
func (a *Ahead) waitWrites(ctx context.Context, off, end int64) {
	for {
		i := -1
		for j := range a.slots {
			s := &a.slots[j]
			if s.state == slotWriting && overlaps(s, off, end) && (i < 0 || s.seq < a.slots[i].seq) {
				i = j
			}
		}
		if i < 0 {
			return
		}
		a.wait(ctx, i)
	}
}

// drop forgets the read-ahead of the slots that f selects, after waiting
// for the requests still in flight.
func (a *Ahead) drop(f func(s *slot) bool) {
	for i := range a.slots {
		s := &a.slots[i]
		if (s.state == slotReading || s.state == slotRead) && f(s) {
			if s.state == slotReading {
				a.wait(a.ctx, i)
			}
			s.state, s.err = slotFree, nil
		}
	}
}

// find returns the slot reading or holding the block at off, or -1.
func (a *Ahead) find(off int64) int {
	for i := range a.slots {
		if s := &a.slots[i]; (s.state == slotReading || s.state == slotRead) && s.off == off {
			return i
		}
	}
	return -1
}

// ReadAt reads len(p) bytes at off; see Ahead.
func (a *Ahead) ReadAt(p []byte, off int64) (int, error) {
	a.waitWrites(a.ctx, 0, math.MaxInt64)
	if err := a.deferred(); err != nil {
		return 0, err
	}
	end := off + int64(len(p))
	last := off / a.block * a.block
	for pos := off; pos < end; {
		blk := pos / a.block * a.block
		stop := min(blk+a.block, end)
		q := p[pos-off : stop-off]
		last = blk
		if i := a.find(blk); i >= 0 {
			s := &a.slots[i]
			if s.state == slotReading {
				a.wait(a.ctx, i)
			}
			if s.err == nil && stop-blk <= int64(s.n) {
				a.cp.AddCopy(int64(copy(q, s.buf[pos-blk:])))
				pos = stop
				continue
			}
			// The read-ahead failed: read what this call needs on demand,
			// so that an error is this range's own, at its own offset.
			s.state, s.err = slotFree, nil
		}
		if m, err := readFull(a.be, q, pos); err != nil {
			return int(pos-off) + m, err
		}
		pos = stop
	}
	a.readAhead(last)
	return len(p), nil
}

// readAhead keeps the depth blocks after the one at last being read,
// dropping any other read-ahead but last's own block.
func (a *Ahead) readAhead(last int64) {
	hi := last + int64(a.depth)*a.block
	a.drop(func(s *slot) bool { return s.off < last || s.off > hi })
	for blk := last + a.block; blk <= hi && blk < a.size; blk += a.block {
		if a.find(blk) >= 0 {
			continue
		}
		i := a.free()
		if i < 0 {
			return
		}
		a.start(i, false, blk, int(min(a.block, a.size-blk)))
	}
}

// free returns a free slot, making one from a finished read-ahead if it
// must, or -1 when there is none.
func (a *Ahead) free() int {
	j := -1
	for i := range a.slots {
		switch a.slots[i].state {
		case slotFree:
			return i
		case slotRead:
			if j < 0 || a.slots[i].off < a.slots[j].off {
				j = i
			}
		}
	}
	if j >= 0 {
		a.slots[j].state, a.slots[j].err = slotFree, nil
	}
	return j
}

// inFlight returns how many requests are in flight and the oldest.
func (a *Ahead) inFlight() (n, oldest int) {
	oldest = -1
	for i := range a.slots {
		if s := &a.slots[i]; s.state == slotReading || s.state == slotWriting {
			n++
			if oldest < 0 || s.seq < a.slots[oldest].seq {
				oldest = i
			}
		}
	}
	return n, oldest
}

// WriteAt copies p, starts writing it at off and returns; see Ahead.
func (a *Ahead) WriteAt(p []byte, off int64) (int, error) {
	if err := a.deferred(); err != nil {
		return 0, err
	}
	end := off + int64(len(p))
	a.drop(func(s *slot) bool { return overlaps(s, off, end) })
	for pos := off; pos < end; {
		stop := min(pos+a.block, end)
		a.waitWrites(a.ctx, pos, stop)
		for n, oldest := a.inFlight(); n >= a.depth; n, oldest = a.inFlight() {
			a.wait(a.ctx, oldest)
		}
		if err := a.deferred(); err != nil {
			return int(pos - off), err
		}
		i := a.free()
		a.cp.AddCopy(int64(copy(a.slots[i].buf, p[pos-off:stop-off])))
		a.start(i, true, pos, int(stop-pos))
		pos = stop
	}
	return len(p), nil
}

// settle waits for every request in flight and returns the error of a
// failed write behind.
func (a *Ahead) settle(ctx context.Context) error {
	for n, oldest := a.inFlight(); n > 0; n, oldest = a.inFlight() {
		a.wait(ctx, oldest)
	}
	return a.deferred()
}

// Flush waits for the writes behind, then flushes the backend (its Flush
// or Sync method; a backend with neither is taken to be write-through).
func (a *Ahead) Flush(ctx context.Context) error {
	a.waitWrites(ctx, 0, math.MaxInt64)
	if err := a.deferred(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch f := a.be.(type) {
	case ata.Flusher:
		return f.Flush(ctx)
	case ata.Syncer:
		return f.Sync()
	}
	return nil
}

// Trim waits for the requests that overlap the range, then discards it in
// the backend (ErrNoTrim without a Trim method).
func (a *Ahead) Trim(ctx context.Context, off, length int64) error {
	if err := a.deferred(); err != nil {
		return err
	}
	t, ok := a.be.(ata.Trimmer)
	if !ok {
		return ErrNoTrim
	}
	a.drop(func(s *slot) bool { return overlaps(s, off, off+length) })
	a.waitWrites(ctx, off, off+length)
	if err := a.deferred(); err != nil {
		return err
	}
	return t.Trim(ctx, off, length)
}

// Close waits for every request in flight and returns the errors of the
// writes behind that failed and were not reported yet. It does not close
// the backend.
func (a *Ahead) Close() error {
	err := a.settle(a.ctx)
	for e := a.deferred(); e != nil; e = a.deferred() {
		err = errors.Join(err, e)
	}
	return err
}
