package nbd

import "sync/atomic"

// A session's share of the BufferMemory budget (Server.ConnBufferMemory).
// The budget alone is first come, first served: a client that sends large
// READs and stops reading the replies holds every buffer they reserved
// until ReplyTimeout ends its session, and every other session's requests
// that need buffers wait as long. So a session's reader does not start a
// request that needs buffers while the session's requests in flight hold
// its share: it first writes the replies it holds back, then waits for
// replies to be written. The requests it waits for need nothing from the
// reader (their payloads are read, the workers and the writer serve
// them), so the wait always ends. A request that needs more than the
// share alone starts when the session holds nothing, so a session holds at
// most the larger of its share and one request's buffers.

// serverShare counts the buffer bytes a session's requests reserve, for
// its reader to wait on.
type serverShare struct {
	limit   int64 // the share; 0: none
	held    atomic.Int64
	waiting atomic.Bool   // the reader waits for held to fall
	wake    chan struct{} // one token: held fell while the reader waited
}

// fits reports whether a request needing n bytes may start beside what
// the session holds.
func (sh *serverShare) fits(n int64) bool {
	if sh.limit == 0 || n == 0 {
		return true
	}
	h := sh.held.Load()
	return h == 0 || h+n <= sh.limit
}

// add counts n more bytes reserved by the session.
func (sh *serverShare) add(n int64) { sh.held.Add(n) }

// sub counts n bytes given back, and wakes the reader if it waits.
func (sh *serverShare) sub(n int64) {
	if n == 0 {
		return
	}
	sh.held.Add(-n)
	if sh.waiting.Load() {
		select {
		case sh.wake <- struct{}{}:
		default:
		}
	}
}

// connNeed returns the buffer bytes request s will reserve: what reserve
// takes for a read or a block status, a write's payload in whole buffers,
// nothing for the rest (and for payloads past the maximum: they are
// refused).
func (r *serverReader) connNeed(s *serverSlot) int64 {
	c := r.c
	switch s.req.Type {
	case CmdRead:
		if s.req.Length <= c.export.maxPayload && !c.lend {
			return serverNeed(int64(s.req.Length))
		}
	case CmdWrite:
		if s.req.Length <= c.export.maxPayload {
			return serverNeed(int64(s.req.Length))
		}
	case CmdBlockStatus:
		return serverSmallBuf
	}
	return 0
}

// awaitShare returns once request s fits the session's share, having
// written the replies the reader held back if it has to wait; or the
// connection's context error.
func (r *serverReader) awaitShare(s *serverSlot) error {
	sh := &r.ts.share
	n := r.connNeed(s)
	if sh.fits(n) {
		return nil
	}
	r.release()
	defer sh.waiting.Store(false)
	for {
		sh.waiting.Store(true)
		if sh.fits(n) { // after waiting is set: a sub that came first is seen
			return nil
		}
		select {
		case <-sh.wake:
		case <-r.c.ctx.Done():
			return r.c.ctx.Err()
		}
	}
}

// unreserve ends the reservation of s, in the budget and in the
// session's share.
func (c *serverConn) unreserve(ts *serverTransmitState, s *serverSlot) {
	c.srv.budget.unreserve(s.reserved, &s.ticket)
	ts.share.sub(s.reserved)
	s.reserved = 0
}
