package nbd

import (
	"context"
	"errors"
	"fmt"
)

// ErrHandle reports a Wait for a handle that names no request in flight:
// one the client never returned, or one already waited for; and a second
// Call.Wait of the same Call.
var ErrHandle = errors.New("nbd: handle names no request in flight")

// StartReadAt starts a READ of len(p) bytes at off into p, as StartRead
// does, and returns a handle to wait for it with Wait. It makes *Client an
// asynchronous backend (package dma's AsyncReaderAt, package ata's
// AsyncReaderAt) with no adapter in between.
//
// The handle contract: every handle returned with a nil error is waited
// for exactly once, in any order, from any goroutine; p belongs to the
// request until its Wait returns; a failed StartReadAt returns no request
// to wait for. An empty p starts nothing and returns handle 0, whose Wait
// returns nil at once. ctx bounds the start (a free in-flight slot, the
// write of the request), not the reply. The request holds one of its
// connection's in-flight slots until it is waited for (see Call).
func (c *Client) StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	call, err := c.StartRead(ctx, p, off, 0)
	if err != nil {
		return 0, err
	}
	return c.handle(call), nil
}

// StartWriteAt starts a WRITE of p at off, as StartWrite does, and returns
// a handle to wait for it with Wait. p must not change until Wait returns.
// The contract is StartReadAt's.
func (c *Client) StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error) {
	call, err := c.StartWrite(ctx, p, off, 0)
	if err != nil {
		return 0, err
	}
	return c.handle(call), nil
}

// Wait waits for the request StartReadAt or StartWriteAt returned h for
// and returns its error, as Call.Wait does: a READ succeeds only if it
// filled p, and a READ that fails has p zeroed. If ctx ends first, the
// request is abandoned (nothing more is written into p), Wait returns
// ctx's error and h is spent. A handle that names no request in flight
// (never returned, or already waited for, by this goroutine or another)
// gets ErrHandle at once. Wait is safe for concurrent use, for different
// handles.
func (c *Client) Wait(ctx context.Context, h uint64) error {
	if h == 0 {
		return nil
	}
	call, ok := c.claim(h)
	if !ok {
		return fmt.Errorf("%w: %#x", ErrHandle, h)
	}
	return call.wait(ctx)
}

// A handle names a request by where it is, not by a table of its own: the
// high 32 bits are the generation of the request's slot (the high half of
// the request's cookie), the low 32 bits one more than the slot's index
// counted over every connection's slots in turn (so no request has handle
// 0). A slot's generation goes up by one
// when a request starts on it (clientConn.start) and by one more when a
// Wait (of a handle or of a Call) claims it, under the slot's lock, so
// the same handle is never claimed twice: a second Wait, or one of a handle
// whose slot has moved on to another request, finds another generation
// (until the slot's 32-bit generation wraps around, some billions of
// requests later).

// handle returns the handle of a call just started (the caller still owns
// it, so its slot is stable).
func (c *Client) handle(call Call) uint64 {
	if call.cc == nil {
		return 0 // an empty request: nothing in flight
	}
	base := 0
	for _, cc := range c.conns {
		if cc == call.cc {
			break
		}
		base += len(cc.slots)
	}
	s := call.s
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	return uint64(gen)<<32 | uint64(base+int(s.idx)+1)
}

// claim finds the request h names and takes it for one Wait, or reports
// that h names none.
func (c *Client) claim(h uint64) (Call, bool) {
	gen, i := uint32(h>>32), int(uint32(h))-1
	if i < 0 {
		return Call{}, false
	}
	for _, cc := range c.conns {
		if i < len(cc.slots) {
			return cc.claim(&cc.slots[i], gen)
		}
		i -= len(cc.slots)
	}
	return Call{}, false
}

// claim takes the request in slot s for one Wait if it is of generation
// gen.
func (c *clientConn) claim(s *clientSlot, gen uint32) (Call, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inflight || s.abandoned || s.gen != gen {
		return Call{}, false
	}
	s.gen++ // spent: the next Wait of h finds another generation
	call := Call{cc: c, s: s, gen: gen}
	if s.cmd == CmdRead {
		call.read = s.buf
	}
	return call, true
}
