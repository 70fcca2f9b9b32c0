package nbd

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nhdkit/nhd/zerocopy"
)

// The server's payload buffers: write payloads and read replies live in
// reference-counted buffers of package zerocopy, taken from two pools
// shared by every connection of a Server, with room in front of the data
// for a reply's header (a simple reply, or a chunk header and the
// OFFSET_DATA offset), so a read reply is pushed into the headroom of its
// first buffer and leaves in one piece.

// serverHeadroom is the space kept in front of a buffer's data: a
// structured chunk header and the OFFSET_DATA offset.
const serverHeadroom = ChunkHeaderSize + OffsetDataHeaderSize

// Sizes of the server's buffers: a payload of up to serverSmallBuf bytes
// takes one small buffer, a larger one as many large buffers as it needs
// (one backend call each).
const (
	serverSmallBuf = 64 << 10
	serverLargeBuf = 1 << 20
)

// serverBuffers are the buffer pools of a Server, and its free pages
// for PageTakers.
type serverBuffers struct {
	small, large *zerocopy.Pool

	mu        sync.Mutex
	pages     []*[PageSize]byte // free
	pageCount int64             // pages that exist: free or in a request
	pageGets  int64
}

// getPage returns a page for a write of whole pages, free or new.
func (b *serverBuffers) getPage() *[PageSize]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pageGets++
	if n := len(b.pages); n > 0 {
		p := b.pages[n-1]
		b.pages[n-1] = nil
		b.pages = b.pages[:n-1]
		return p
	}
	b.pageCount++
	return new([PageSize]byte)
}

// putPage returns a page to the free list: the one a write did not hand
// over, or the one a PageTaker gave back.
func (b *serverBuffers) putPage(p *[PageSize]byte) {
	b.mu.Lock()
	b.pages = append(b.pages, p)
	b.mu.Unlock()
}

// gavePage records a page handed over to a PageTaker for good.
func (b *serverBuffers) gavePage() {
	b.mu.Lock()
	b.pageCount--
	b.mu.Unlock()
}

// allocated returns the bytes of buffers and pages that exist.
func (b *serverBuffers) allocated() int64 {
	small, large := b.small.Stats(), b.large.Stats()
	b.mu.Lock()
	pages := b.pageCount
	b.mu.Unlock()
	return (small.Allocs-small.Dropped)*serverSmallBuf + (large.Allocs-large.Dropped)*serverLargeBuf + pages*PageSize
}

// gets returns how many buffers and pages were ever taken.
func (b *serverBuffers) gets() int64 {
	b.mu.Lock()
	pages := b.pageGets
	b.mu.Unlock()
	return b.small.Stats().Gets + b.large.Stats().Gets + pages
}

// trim lets every free buffer and page go to the garbage collector.
func (b *serverBuffers) trim() {
	b.small.Trim(0)
	b.large.Trim(0)
	b.mu.Lock()
	b.pageCount -= int64(len(b.pages))
	clear(b.pages)
	b.pages = b.pages[:0]
	b.mu.Unlock()
}

// trimFor makes room for buffers of n bytes: it lets go the free buffers
// and pages that a request of n bytes does not take, and keeps the free
// buffers it takes, to be reused rather than allocated again (letting
// them go would only make garbage). So buffers that exist stay covered
// by reservations: a new buffer is allocated only when its pool has none
// free.
func (b *serverBuffers) trimFor(n int64) {
	if n <= serverSmallBuf {
		b.large.Trim(0)
		return
	}
	b.small.Trim(0)
	b.mu.Lock()
	b.pageCount -= int64(len(b.pages))
	clear(b.pages)
	b.pages = b.pages[:0]
	b.mu.Unlock()
}

func newServerBuffers() *serverBuffers {
	pool := func(size int) *zerocopy.Pool {
		p, err := zerocopy.NewPoolConfig(zerocopy.Config{Size: size, Headroom: serverHeadroom})
		if err != nil {
			panic(err) // constant sizes
		}
		return p
	}
	return &serverBuffers{small: pool(serverSmallBuf), large: pool(serverLargeBuf)}
}

// pool returns the pool for a payload of n bytes.
func (b *serverBuffers) pool(n int64) *zerocopy.Pool {
	if n <= serverSmallBuf {
		return b.small
	}
	return b.large
}

// serverFUAAt writes through a FUAWriter's WriteAtFUA, as an io.WriterAt
// for zerocopy.Message.WriteToAt.
type serverFUAAt struct{ w FUAWriter }

func (f *serverFUAAt) WriteAt(p []byte, off int64) (int, error) { return f.w.WriteAtFUA(p, off) }

// DefaultBufferMemory is the default of Server.BufferMemory.
const DefaultBufferMemory = 128 << 20

// serverBufferIdle is how long the buffer pools go unused before their
// free buffers are let go.
const serverBufferIdle = time.Second

// serverBudget bounds the memory of the server's payload buffers: every
// request that needs buffers reserves the bytes of each buffer before it
// takes it (a read its whole reply's at once, serverNeed; a write one
// buffer at a time as its payload arrives), and gives them all back once
// its reply is written; a reservation past the limit waits. In use,
// buffers are covered by reservations; free buffers (in the pools, and
// pages) are let go when a reservation would bring the total past the
// limit, and when the pools have gone unused for serverBufferIdle.
//
// A write holding part of its buffers may wait for the rest, so writers
// could each hold part of the budget and all wait for the others. So one
// request at a time, the one that has waited longest ("privileged"), may
// go past the limit by up to extra (the buffers of a request of
// MaxPayload) until its reply is written: it never waits, finishes, and
// gives its buffers back. At worst the buffers take limit + extra.
type serverBudget struct {
	bufs  *serverBuffers
	limit int64
	extra int64
	share int64 // Server.ConnBufferMemory or its default; 0: none

	mu       sync.Mutex
	reserved int64
	waiters  int
	wake     chan struct{} // closed and replaced when a reservation ends while others wait
	timer    *time.Timer   // the idle check, armed while buffers exist
	armed    bool
	lastGets int64

	// Tickets of the requests waiting, oldest first, and the privileged
	// one's (0: none). A request takes a ticket when it first waits and
	// keeps it until its reservation ends.
	queue   []uint64
	tickets uint64
	priv    uint64

	release bool // Server.FreeOSMemory
	dirty   bool // memory let go since the last release
	echoes  int  // releases still to repeat after the last one
}

// serverNeed returns the reservation of a payload of n bytes: the
// buffers it takes, whole.
func serverNeed(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n <= serverSmallBuf:
		return serverSmallBuf
	}
	return (n + serverLargeBuf - 1) / serverLargeBuf * serverLargeBuf
}

// reserve adds n bytes to the reservation of the request holding ticket
// (*ticket is 0 until it first waits), waiting while the budget has no
// room: first calling before (if not nil) once, so the caller puts down
// what others may wait for, then until reservations end or ctx is done.
func (b *serverBudget) reserve(ctx context.Context, n int64, ticket *uint64, before func()) error {
	if n == 0 {
		return nil
	}
	b.mu.Lock()
	for !b.fits(n, *ticket) {
		if *ticket == 0 {
			b.tickets++
			*ticket = b.tickets
		}
		if !b.queued(*ticket) {
			b.queue = append(b.queue, *ticket)
		}
		if b.priv == 0 && b.queue[0] == *ticket {
			b.priv = *ticket
			continue
		}
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		ch := b.wake
		b.waiters++
		b.mu.Unlock()
		if before != nil {
			before()
			before = nil
		}
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.mu.Lock()
		b.waiters--
		if err != nil {
			b.dequeue(*ticket)
			b.mu.Unlock()
			return err
		}
	}
	b.dequeue(*ticket)
	b.reserved += n
	if b.reserved > b.limit/2 && b.bufs.allocated()+n > b.limit {
		b.bufs.trimFor(n)
	}
	b.arm()
	b.mu.Unlock()
	return nil
}

// fits reports whether n more bytes fit the budget for the request
// holding ticket. Call with b.mu held.
func (b *serverBudget) fits(n int64, ticket uint64) bool {
	if ticket != 0 && ticket == b.priv {
		return b.reserved+n <= b.limit+b.extra
	}
	return b.reserved+n <= b.limit
}

// queued reports whether ticket waits. Call with b.mu held.
func (b *serverBudget) queued(ticket uint64) bool {
	for _, t := range b.queue {
		if t == ticket {
			return true
		}
	}
	return false
}

// dequeue forgets ticket as a waiter. Call with b.mu held.
func (b *serverBudget) dequeue(ticket uint64) {
	for i, t := range b.queue {
		if t == ticket {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return
		}
	}
}

// unreserve ends the reservation, of n bytes, of the request holding
// ticket, and clears the ticket.
func (b *serverBudget) unreserve(n int64, ticket *uint64) {
	if n == 0 && *ticket == 0 {
		return
	}
	b.mu.Lock()
	b.reserved -= n
	if *ticket != 0 && *ticket == b.priv {
		b.priv = 0
	}
	*ticket = 0
	if b.waiters > 0 && b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}

// arm starts the idle check unless it runs. Call with b.mu held.
func (b *serverBudget) arm() {
	if b.armed {
		return
	}
	b.armed = true
	if b.timer == nil {
		b.timer = time.AfterFunc(serverBufferIdle, b.idleCheck)
	} else {
		b.timer.Reset(serverBufferIdle)
	}
}

// idleCheck lets the free buffers go when none was taken since the last
// check, and checks again later while any buffer exists. Once none
// does, with release set and memory let go since the last time (buffers,
// or connections ended), it returns the process's free memory to the
// system.
func (b *serverBudget) idleCheck() {
	b.mu.Lock()
	gets := b.bufs.gets()
	if gets == b.lastGets {
		if b.bufs.allocated() > 0 {
			b.dirty = true
		}
		b.bufs.trim()
	}
	b.lastGets = gets
	if b.reserved != 0 || b.bufs.allocated() != 0 {
		b.timer.Reset(serverBufferIdle)
		b.mu.Unlock()
		return
	}
	b.armed = false
	free := b.release && b.dirty
	b.dirty = false
	if free && b.echoes > 0 {
		// Release again a little later: what connections that were
		// still ending held at this release goes at the next.
		b.echoes--
		b.dirty = true
		b.arm()
	}
	b.mu.Unlock()
	if free {
		debug.FreeOSMemory()
	}
}

// serverReleaseEchoes is how many more times the idle check returns
// memory to the system after the last connection ended, a second apart.
const serverReleaseEchoes = 3

// connsEnded notes that the last connection ended: what it held is
// returned to the system at the next idle check, with release set.
func (b *serverBudget) connsEnded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.release {
		b.dirty = true
		b.echoes = serverReleaseEchoes
		b.arm()
	}
}

// BufferStats is a snapshot of a Server's payload buffers (Server.BufferStats).
type BufferStats struct {
	// Limit is the budget, Server.BufferMemory or its default.
	Limit int64
	// Reserved is the bytes reserved by requests in flight.
	Reserved int64
	// Allocated is the bytes of buffers that exist now, in use or free.
	Allocated int64
}

// BufferStats returns the state of the server's payload buffers.
func (s *Server) BufferStats() BufferStats {
	if s.init() != nil {
		return BufferStats{}
	}
	b := s.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	return BufferStats{Limit: b.limit, Reserved: b.reserved, Allocated: b.bufs.allocated()}
}
