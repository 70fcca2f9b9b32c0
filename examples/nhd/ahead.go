package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/nbd"
)

// ahead pipelines a drive's back end with its front end across commands,
// with up to depth NBD requests in flight on the drive's behalf, each into
// a buffer of its own, while the drive works on another buffer:
//
//   - Read-ahead: after serving a read of [off, off+n), the drive keeps
//     the next depth blocks of n bytes being read; the next command, if it
//     is the read of the first of them, finds its data fetched or being
//     fetched. Any other command discards them.
//   - Write-behind: a write's data goes from the host into a buffer and the
//     command completes; the NBD write goes on while the host prepares the
//     next commands, up to depth writes at once. A write waits
//     for any write behind that overlaps it, so the back end sees them in
//     order. A read waits for every write behind first. An error of a write
//     behind is returned by the next command (and by FLUSH CACHE), as a
//     disk with a write cache reports a deferred write error.
//
// With an NBD client for back end, the requests are kept in flight from
// the drive's own goroutine (nbd.Client.StartRead, StartWrite): no
// goroutine hand-off on the way, and the client reads each reply when the
// drive waits for it. Any other back end (the memory disk the front end is
// measured over) is called when a request starts. Everything is the
// drive's goroutine's.
type ahead struct {
	be    ata.Backend
	st    starter // be, when it can keep requests in flight
	size  int64
	slots []slot // depth+1: one for the drive, depth for requests in flight
	q     []int  // the slots in flight, oldest first
	cur   int    // the slot the drive's current command uses, or -1
	err   error  // a write behind that failed, not yet reported

	hits, misses, behind int64 // read-ahead used, reads made on demand, writes behind
}

// starter is a back end that keeps requests in flight from one goroutine.
type starter interface {
	StartRead(ctx context.Context, p []byte, off int64, flags nbd.CmdFlags) (nbd.Call, error)
	StartWrite(ctx context.Context, p []byte, off int64, flags nbd.CmdFlags) (nbd.Call, error)
}

// slot is a buffer and the request made with it.
type slot struct {
	buf   []byte
	off   int64
	n     int64
	write bool
	busy  bool     // in flight: the buffer is the request's until waited for
	call  nbd.Call // the request, with a starter
	err   error    // its result when it could not start, or without a starter
}

func newAhead(be ata.Backend, bs, depth int) *ahead {
	depth = max(depth, 1)
	a := &ahead{be: be, size: math.MaxInt64, cur: -1, slots: make([]slot, depth+1), q: make([]int, 0, depth)}
	a.st, _ = be.(starter)
	if s, ok := be.(interface{ Size() int64 }); ok {
		a.size = s.Size()
	}
	for i := range a.slots {
		a.slots[i] = slot{buf: make([]byte, bs)}
	}
	return a
}

// depth is how many requests the drive keeps in flight at most.
func (a *ahead) depth() int { return len(a.slots) - 1 }

// start makes the request of slot i: sends it, or with a back end that
// cannot keep it in flight, makes it now.
func (a *ahead) start(i int, write bool, off, n int64) {
	s := &a.slots[i]
	s.off, s.n, s.write, s.busy = off, n, write, true
	s.call, s.err = nbd.Call{}, nil
	a.q = append(a.q, i)
	b := s.buf[:n]
	ctx := context.Background()
	switch {
	case a.st != nil && write:
		s.call, s.err = a.st.StartWrite(ctx, b, off, 0)
	case a.st != nil:
		s.call, s.err = a.st.StartRead(ctx, b, off, 0)
	case write:
		_, s.err = a.be.WriteAt(b, off)
	default:
		if m, err := a.be.ReadAt(b, off); m < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			s.err = err
		}
	}
}

// waitOldest waits for the oldest request in flight and returns its slot
// and error; the error of a write is also kept for the next command.
func (a *ahead) waitOldest() (int, error) {
	i := a.q[0]
	copy(a.q, a.q[1:])
	a.q = a.q[:len(a.q)-1]
	s := &a.slots[i]
	err := s.call.Wait(context.Background())
	if s.err != nil {
		err = s.err
	}
	s.busy = false
	if err != nil && s.write && a.err == nil {
		a.err = fmt.Errorf("write behind at byte %d: %w", s.off, err)
	}
	return i, err
}

// free returns a slot neither in flight nor the drive's.
func (a *ahead) free() int {
	for i := range a.slots {
		if !a.slots[i].busy && i != a.cur {
			return i
		}
	}
	panic("nhd: no free read-ahead slot") // depth+1 slots, at most depth in flight
}

// writesInFlight reports whether the requests in flight are writes (they
// are all of one kind: a read waits for the writes, a write drops the
// reads).
func (a *ahead) writesInFlight() bool {
	return len(a.q) > 0 && a.slots[a.q[0]].write
}

// waitAll waits for every request in flight.
func (a *ahead) waitAll() {
	for len(a.q) > 0 {
		a.waitOldest()
	}
}

// drain waits for every request in flight and returns any deferred write
// error.
func (a *ahead) drain() error {
	a.waitAll()
	return a.deferred()
}

// deferred returns and clears the error of a failed write behind.
func (a *ahead) deferred() error {
	err := a.err
	a.err = nil
	return err
}

// read returns a buffer holding [off, off+n) of the back end: the oldest
// read-ahead when it was this range, else read now through src (the
// device's view of the back end, which records the failing address). It
// then keeps the next blocks being read ahead. The buffer is the drive's
// until its next command.
func (a *ahead) read(src io.ReaderAt, off, n int64) ([]byte, error) {
	if int64(len(a.slots[0].buf)) < n {
		return nil, errStage
	}
	a.cur = -1
	if a.writesInFlight() {
		a.waitAll()
	}
	if err := a.deferred(); err != nil {
		return nil, err
	}
	if len(a.q) > 0 {
		if s := &a.slots[a.q[0]]; s.off == off && s.n == n {
			if i, err := a.waitOldest(); err == nil {
				a.cur = i
				a.hits++
			}
		}
		if a.cur < 0 {
			// Not the read expected: what is in flight is of no use.
			a.waitAll()
		}
	}
	next := off + n
	if a.cur < 0 {
		a.misses++
		a.cur = a.free()
		if m, err := src.ReadAt(a.slots[a.cur].buf[:n], off); int64(m) < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	if k := len(a.q); k > 0 {
		last := &a.slots[a.q[k-1]]
		next = last.off + last.n
	}
	for len(a.q) < a.depth() && next <= a.size-n {
		a.start(a.free(), false, next, n)
		next += n
	}
	return a.slots[a.cur].buf[:n], nil
}

// writeBuffer returns the buffer the next write's data goes into: read-
// aheads are dropped (the write may change what they read), and with depth
// writes behind in flight the oldest is waited for.
func (a *ahead) writeBuffer(n int64) ([]byte, error) {
	if int64(len(a.slots[0].buf)) < n {
		return nil, errStage
	}
	a.cur = -1
	if len(a.q) > 0 && !a.writesInFlight() {
		a.waitAll()
	}
	if len(a.q) == a.depth() {
		a.waitOldest()
	}
	if err := a.deferred(); err != nil {
		return nil, err
	}
	a.cur = a.free()
	return a.slots[a.cur].buf[:n], nil
}

// writeBehind hands the drive's buffer, just filled from the host with the
// data of [off, off+len(buf)), to a worker, after any write behind that
// overlaps it.
func (a *ahead) writeBehind(buf []byte, off int64) {
	end := off + int64(len(buf))
	for overlap := true; overlap; {
		overlap = false
		for _, i := range a.q {
			if s := &a.slots[i]; s.off < end && off < s.off+s.n {
				overlap = true
				break
			}
		}
		if overlap {
			a.waitOldest()
		}
	}
	a.behind++
	i := a.cur
	a.cur = -1
	a.start(i, true, off, int64(len(buf)))
}

// close waits for the requests in flight and returns any deferred write
// error.
func (a *ahead) close() error { return a.drain() }

// cachedBackend is the device's view of a back end behind read-ahead and
// write-behind: a flush first waits for the writes behind, so FLUSH CACHE
// covers every write the device has completed.
type cachedBackend struct {
	ata.Backend
	a *ahead
}

func (c *cachedBackend) Flush(ctx context.Context) error {
	if err := c.a.drain(); err != nil {
		return err
	}
	if f, ok := c.Backend.(ata.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// Size reports the back end's size (the device checks its capacity
// against it), or the largest int64 when the back end does not say.
func (c *cachedBackend) Size() int64 { return c.a.size }
