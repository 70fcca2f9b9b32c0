package nbd

import (
	"context"
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

// getPage returns a page for a whole-page write, free or new.
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
// request that needs buffers reserves, before it takes any, the bytes of
// the buffers it may take (serverNeed), and gives them back once its reply
// is written; a reservation past the limit waits. In use, buffers are
// covered by reservations; free buffers (in the pools, and pages) are
// let go when a reservation would bring the total past the limit, and
// when the pools have gone unused for serverBufferIdle.
type serverBudget struct {
	bufs  *serverBuffers
	limit int64

	mu       sync.Mutex
	reserved int64
	waiters  int
	wake     chan struct{} // closed and replaced when a reservation ends while others wait
	timer    *time.Timer   // the idle check, armed while buffers exist
	armed    bool
	lastGets int64
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

// reserve reserves n bytes, waiting while the budget has no room: first
// calling before (if not nil) once, so the caller puts down what others
// may wait for, then until reservations end or ctx is done.
func (b *serverBudget) reserve(ctx context.Context, n int64, before func()) error {
	if n == 0 {
		return nil
	}
	b.mu.Lock()
	for b.reserved+n > b.limit {
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
			b.mu.Unlock()
			return err
		}
	}
	b.reserved += n
	if b.reserved > b.limit/2 && b.bufs.allocated()+n > b.limit {
		b.bufs.trim()
	}
	b.arm()
	b.mu.Unlock()
	return nil
}

// unreserve ends a reservation of n bytes.
func (b *serverBudget) unreserve(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.reserved -= n
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
// check, and checks again later while any buffer exists.
func (b *serverBudget) idleCheck() {
	b.mu.Lock()
	defer b.mu.Unlock()
	gets := b.bufs.gets()
	if gets == b.lastGets {
		b.bufs.trim()
	}
	b.lastGets = gets
	if b.reserved == 0 && b.bufs.allocated() == 0 {
		b.armed = false
		return
	}
	b.timer.Reset(serverBufferIdle)
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
