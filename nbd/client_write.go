package nbd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
)

// The write path. A request is queued (wq), then written by whoever holds
// the write lock (wsem): its own caller, or another caller that took the
// lock and writes every request queued at that moment, headers and
// payloads, in one writev. So requests started together by many goroutines
// share a syscall, while a request alone is one write of its own, as
// before. Replies wake their callers one after another on the reader's
// processor, so each would find the lock free and write alone: a caller
// that starts a request while callers woken by replies have not yet run
// (clientConn.woken) yields first, letting them queue theirs. A caller
// that no reply woke (one goroutine keeping requests in flight by handle)
// never yields. A caller returns from start only once its request is on the
// wire (or taken back), so a WRITE's payload is never read after the call
// that owns it has returned.
//
// Where a request is, in slot.wstate (changed under wmu):
//
//	idle -> queued (start) -> taken (a writer put it in its batch)
//	taken -> sent (all of it went out) | cut (part of it went out: the
//	         connection is closed) | queued (none of it went out: the
//	         write was cut by a deadline; its caller takes it back or
//	         writes it again)
//	queued -> idle (its caller took it back: its context ended, or the
//	          connection died)
//
// A batch never carries a WRITE payload after a READ or BLOCK_STATUS
// request: a server that answers one request at a time (nbd-server) may
// block sending that reply until it is read, and stop reading the payload,
// while the caller who would read the reply waits for the batch's writev
// to end. Requests without payloads never block a writev for long; a
// payload alone or after other payloads only waits for the server to
// read it.
//
// A write is cut by a write deadline when the context of its writer, or of
// any caller whose request it is writing, ends. A request cut half-way
// cannot be taken back: the connection is closed (ErrConnectionLost).

const (
	clientWIdle uint32 = iota
	clientWQueued
	clientWTaken
	clientWSent
	clientWCut // went out in part: the connection is being closed
)

// start sends a request on slot s. wbuf is the WRITE payload; rbuf the READ
// destination (len(rbuf) == length). On error the slot has been released.
func (c *clientConn) start(ctx context.Context, s *clientSlot, cmd Command, flags CmdFlags, off uint64, length uint32, wbuf, rbuf []byte) error {
	s.mu.Lock()
	s.gen++
	s.cookie = uint64(s.gen)<<32 | uint64(s.idx)
	s.cmd, s.flags, s.off, s.length = cmd, flags, off, length
	s.buf = rbuf
	s.inflight = true
	req := Request{Flags: flags, Type: cmd, Cookie: s.cookie, Offset: off, Length: length}
	req.Put(&s.hdr)
	s.wbuf = wbuf
	s.mu.Unlock()

	c.wmu.Lock()
	s.wstate.Store(clientWQueued)
	c.wq = append(c.wq, s)
	c.wmu.Unlock()
	if c.canWritev && c.woken.Load() > 0 {
		// Callers that a reply woke are about to run, most of them to
		// start their next request: let them queue theirs first, so
		// that one writev carries them all.
		runtime.Gosched()
	}
	return c.push(ctx, s)
}

// push returns once the request in s is on the wire, writing it (and every
// other queued request) itself when it can take the write lock.
func (c *clientConn) push(ctx context.Context, s *clientSlot) error {
	for {
		switch s.wstate.Load() {
		case clientWSent:
			return nil
		case clientWCut:
			<-c.dead // the writer is closing the connection
			err := c.err
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (the connection was closed: part of the request had gone out)", ctx.Err())
			}
			return c.unsend(s, err)
		}
		if err := c.failed(); err != nil {
			return c.unqueue(ctx, s, err)
		}
		if ctx.Err() != nil {
			if err := c.giveUp(ctx, s); err != errClientRetry {
				return err
			}
			continue
		}
		select {
		case c.wsem <- struct{}{}:
			c.flush(ctx, s)
			<-c.wsem
			continue
		default:
		}
		select {
		case <-s.wdone:
		case c.wsem <- struct{}{}:
			c.flush(ctx, s)
			<-c.wsem
		case <-ctx.Done():
			if err := c.giveUp(ctx, s); err != errClientRetry {
				return err
			}
		case <-c.dead:
		}
	}
}

// errClientRetry tells push to look again at where its request is.
var errClientRetry = errors.New("nbd: retry")

// giveUp handles a context that ended before the request in s was sent:
// it is taken back if still queued; if a writer is writing it, the write is
// cut and push looks again once the writer has settled it.
func (c *clientConn) giveUp(ctx context.Context, s *clientSlot) error {
	c.wmu.Lock()
	st := s.wstate.Load()
	if st == clientWQueued {
		c.dequeueLocked(s)
		c.wmu.Unlock()
		return c.unsend(s, ctx.Err())
	}
	c.wmu.Unlock()
	if st == clientWSent {
		return nil // its wait abandons it
	}
	if st == clientWTaken {
		c.wkick()
		select {
		case <-s.wdone:
		case <-c.dead:
		}
	}
	return errClientRetry
}

// unqueue ends a request whose connection died before it was sent (or
// while it was).
func (c *clientConn) unqueue(ctx context.Context, s *clientSlot, err error) error {
	c.wmu.Lock()
	st := s.wstate.Load()
	if st == clientWQueued {
		c.dequeueLocked(s)
	}
	c.wmu.Unlock()
	if st == clientWTaken {
		// The writer that took it settles it promptly: the connection is
		// closed, so its write fails.
		for s.wstate.Load() == clientWTaken {
			select {
			case <-s.wdone:
			case <-time.After(time.Millisecond):
			}
		}
	}
	if ctx.Err() != nil && st == clientWTaken {
		err = fmt.Errorf("%w (the connection was closed: part of the request may have gone out)", ctx.Err())
	}
	return c.unsend(s, err)
}

func (c *clientConn) dequeueLocked(s *clientSlot) {
	for i, q := range c.wq {
		if q == s {
			c.wq = append(c.wq[:i], c.wq[i+1:]...)
			break
		}
	}
	s.wstate.Store(clientWIdle)
}

// unsend takes back a slot whose request was never (wholly) written.
func (c *clientConn) unsend(s *clientSlot, err error) error {
	s.mu.Lock()
	if s.complete {
		// fail got here first and signalled done: drain it.
		<-s.done
	}
	c.resetLocked(s)
	s.mu.Unlock()
	select {
	case <-s.wdone: // a stale hint
	default:
	}
	c.free <- s.idx
	return err
}

// wkick cuts the write in progress, if there is one. A cut can never
// outlive its write (setWriting clears it), so it cannot hit a later one,
// which on a TLS connection would break it for good.
func (c *clientConn) wkick() {
	c.wkickMu.Lock()
	if c.writing {
		c.wkicked = true
		_ = c.nc.SetWriteDeadline(time.Unix(1, 0))
	}
	c.wkickMu.Unlock()
}

// setWriting marks the writer's writev as in progress or over, clearing
// the deadline of a cut that came too late to matter.
func (c *clientConn) setWriting(on bool) {
	c.wkickMu.Lock()
	c.writing = on
	if !on && c.wkicked {
		c.wkicked = false
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	c.wkickMu.Unlock()
}

func (c *clientConn) isTLS() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

// flush writes every queued request, the caller holding the write lock
// on behalf of own (its own request, whose context ctx is).
func (c *clientConn) flush(ctx context.Context, own *clientSlot) {
	if c.failed() != nil {
		return // closed, perhaps after NBD_CMD_DISC: push takes own back
	}
	c.wmu.Lock()
	if own.wstate.Load() != clientWQueued {
		// Sent by another writer meanwhile (or cut and not yet back):
		// the callers of the others write theirs.
		c.wmu.Unlock()
		return
	}
	batch := c.wbatch[:0]
	vec := c.wvec[:0]
	replies := false
	for _, s := range c.wq {
		if replies && len(s.wbuf) > 0 {
			// A payload after a request whose reply carries data: see the
			// comment at the top.
			break
		}
		s.wstate.Store(clientWTaken)
		batch = append(batch, s)
		vec = append(vec, s.hdr[:])
		if len(s.wbuf) > 0 {
			vec = append(vec, s.wbuf)
		}
		replies = replies || s.cmd == CmdRead || s.cmd == CmdBlockStatus
	}
	c.wq = c.wq[:copy(c.wq, c.wq[len(batch):])]
	c.wmu.Unlock()
	c.wbatch = batch
	if len(batch) == 0 {
		return
	}
	c.setWriting(true)
	watched := c.wwatch.begin(ctx)
	written, err := c.writeVec(vec)
	if watched {
		c.wwatch.end() // no cut comes after it: setWriting clears one that came
	}
	c.setWriting(false)
	c.settleBatch(batch, written, err)
	clear(c.wvec[:len(vec)])
	clear(batch)
}

// writeVec writes vec and returns how many bytes went out: on a socket in
// one writev (raw on Linux: zerocopy.Batch), elsewhere (TLS, a pipe) piece
// by piece, so that a large payload is never copied into one flat buffer.
func (c *clientConn) writeVec(vec [][]byte) (int64, error) {
	c.wbatches++
	if c.canWritev {
		for _, b := range vec {
			c.wb.AddBytes(b)
		}
		return c.wb.Write()
	}
	var total int64
	for _, b := range vec {
		n, err := c.nc.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// settleBatch marks what of batch went out (written bytes): those wholly out are
// sent; if the write failed, one cut half-way kills the connection, and
// those not begun go back to the queue (a deadline) or die with it.
func (c *clientConn) settleBatch(batch []*clientSlot, written int64, err error) {
	var failErr error
	c.wmu.Lock()
	var requeue []*clientSlot
	for i, s := range batch {
		n := int64(RequestSize + len(s.wbuf))
		switch {
		case written >= n:
			written -= n
			s.wstate.Store(clientWSent)
		case written > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || c.isTLS():
			// Cut half-way, or a write error: the stream is broken.
			written = 0
			s.wstate.Store(clientWCut)
			if failErr == nil {
				failErr = fmt.Errorf("%w: sending %v: %w", ErrConnectionLost, s.cmd, err)
			}
		default:
			if requeue == nil {
				requeue = batch[i:]
			}
			s.wstate.Store(clientWQueued)
		}
	}
	if len(requeue) > 0 {
		// Back to the front of the queue, in order.
		n := len(c.wq)
		c.wq = append(c.wq, requeue...)
		copy(c.wq[len(requeue):], c.wq[:n])
		copy(c.wq, requeue)
	}
	c.wmu.Unlock()
	for _, s := range batch {
		select {
		case s.wdone <- struct{}{}:
		default:
		}
	}
	if failErr != nil {
		c.fail(failErr)
	}
}
