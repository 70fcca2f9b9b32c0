package nbd

import (
	"context"
	"fmt"
)

// A Call is a READ or WRITE request that StartRead or StartWrite has sent
// and no one has waited for yet. It is a small value, made without
// allocating; wait for it exactly once with Wait.
//
// Replies are read by the callers that wait: the client has no goroutine of
// its own. A started request is served by the server at once, but its reply
// is taken off the connection only when someone waits, for it or for a
// request started after it on the same connection. So a caller can keep
// several requests in flight from one goroutine: start the next ones, work
// on the data of the first, then wait for the second, and so on, with no
// goroutine hand-off on the way (read-ahead and write-behind).
//
// Each call holds one of the connection's in-flight slots (WithMaxInFlight)
// until it is waited for; StartRead and StartWrite block while all are
// taken. Keep no more requests in flight than the server serves at once
// without its replies being read (nbdkit: its thread count, 16 by default;
// this package's Server: its MaxInFlight, 16 by default), or the write of
// a request may wait for a server that waits for its replies to be read.
type Call struct {
	cc   *clientConn
	s    *clientSlot
	gen  uint32 // the slot's generation while this request holds it
	read []byte // a READ's destination, zeroed if the request fails
}

// StartRead sends a READ of len(p) bytes at off (flags: FlagDF only) and
// returns without waiting for the reply. p belongs to the call until Wait
// returns: the reply may be written into it at any moment before then, and
// on error Wait zeroes it. len(p) must be at most the maximum payload
// (BlockSize), and the range within the export; a zero-length call
// completes at once. ctx bounds the wait for a free slot and the write of
// the request, not the reply (Wait's ctx does).
func (c *Client) StartRead(ctx context.Context, p []byte, off int64, flags CmdFlags) (Call, error) {
	if err := c.startCheck(CmdRead, p, off, flags, FlagDF); err != nil {
		return Call{}, err
	}
	return c.startCall(ctx, CmdRead, flags, p, off)
}

// StartWrite sends a WRITE of p at off (flags: FlagFUA only) and returns
// without waiting for the reply. p belongs to the call until Wait returns
// and must not be modified before then: a request written only in part
// when the kernel's socket buffer filled is finished by a later call. The
// limits are StartRead's.
func (c *Client) StartWrite(ctx context.Context, p []byte, off int64, flags CmdFlags) (Call, error) {
	if err := c.writable(); err != nil {
		return Call{}, err
	}
	if err := c.startCheck(CmdWrite, p, off, flags, FlagFUA); err != nil {
		return Call{}, err
	}
	return c.startCall(ctx, CmdWrite, flags, p, off)
}

func (c *Client) startCheck(cmd Command, p []byte, off int64, flags, allowed CmdFlags) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.check(off, int64(len(p))); err != nil {
		return err
	}
	if err := c.checkFlags(cmd, flags, allowed); err != nil {
		return err
	}
	if len(p) > int(c.maxPayload) {
		return fmt.Errorf("%w: %v of %d bytes, at most %d", ErrTooLarge, cmd, len(p), c.maxPayload)
	}
	return nil
}

func (c *Client) startCall(ctx context.Context, cmd Command, flags CmdFlags, p []byte, off int64) (Call, error) {
	if len(p) == 0 {
		return Call{}, nil
	}
	cc := c.pick()
	s, err := cc.acquire(ctx)
	if err != nil {
		return Call{}, err
	}
	// The slot is ours and not in flight, so no one else changes its
	// generation now; start moves it on by one for this request.
	call := Call{cc: cc, s: s, gen: s.gen + 1}
	var wbuf []byte
	if cmd == CmdWrite {
		wbuf = p
	} else {
		call.read = p
	}
	if err := cc.start(ctx, s, cmd, flags, uint64(off), uint32(len(p)), wbuf, call.read); err != nil {
		if call.read != nil {
			clear(call.read)
		}
		return Call{}, err
	}
	return call, nil
}

// Wait waits for the call's reply and returns the request's error (nil for
// the zero Call). While no other caller does, it reads the connection's
// replies, those of requests started before this one included, and hands
// each to its call. If ctx ends first, the request is abandoned: its reply
// is read and dropped later, nothing more is written into its buffer, and
// Wait returns ctx's error. A READ that fails has its buffer zeroed.
//
// Wait is meant to be called once per call. A second Wait of the same call
// (or of a copy of it, from any goroutine) gets ErrHandle at once, never
// another request's result: the call carries the generation of its slot,
// and the first Wait moves the slot's generation on.
func (call Call) Wait(ctx context.Context) error {
	if call.cc == nil {
		return nil
	}
	if _, ok := call.cc.claim(call.s, call.gen); !ok {
		return fmt.Errorf("%w: the Call was already waited for", ErrHandle)
	}
	return call.wait(ctx)
}

// wait is Wait of a call already claimed.
func (call Call) wait(ctx context.Context) error {
	err, abandoned := call.cc.wait(ctx, call.s)
	if !abandoned {
		call.cc.release(call.s)
	}
	if err != nil && call.read != nil {
		clear(call.read)
	}
	return err
}
