package nbd

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/zerocopy"
)

// serverInlineWrite is the largest write the reader serves itself
// without looking at how fast the backend writes.
const serverInlineWrite = 8 << 10

// serverInlineBudget is the average backend write time under which the
// reader serves larger writes itself.
const serverInlineBudget = int64(50 * time.Microsecond)

// serverSlot is one request in flight and everything it needs: its
// header, its payload, its reply and scratch space. A connection owns
// MaxInFlight slots and reuses them, so steady state allocates nothing.
type serverSlot struct {
	hdr   [RequestSize]byte
	req   Request
	errno Errno            // set by the reader when the request already failed
	msg   string           // ... and why
	reply zerocopy.Message // the reply, until written
	data  zerocopy.Message // a write's payload; a structured read's data
	tail  zerocopy.Message // scratch for splitting data into runs
	hdrs  []byte           // chunk headers of a reply in several chunks
	ext   []Extent
	runs  []serverRun
	small [ChunkHeaderSize + 6 + serverMaxMessage]byte
	// A write of whole, aligned pages to a PageTaker: its payload, a
	// page at a time (paged), and after the write the pages the backend
	// gave back.
	pages []*[PageSize]byte
	paged bool
	// counted in serverConn.active: its header was read, its reply not
	// yet written
	counted bool
	// bytes of the budget this request reserved, given back once its
	// reply is written, and its place among the budget's waiters
	reserved int64
	ticket   uint64

	// A read sent from a Lender's memory: the pieces lent, as the reply's
	// views, and the range lent, until the reply is written.
	pieces []LentPiece
	views  [][]byte
	lent   [2]int64 // offset, length; length 0: nothing lent
}

// serverRun is a piece of a structured read reply: data or a hole.
type serverRun struct {
	off  uint64
	n    uint32
	hole bool
}

// chunkHeaders returns scratch space for the headers of n chunks.
func (s *serverSlot) chunkHeaders(n int) []byte {
	if cap(s.hdrs) < n*serverHoleChunkSize {
		s.hdrs = make([]byte, max(n, serverMaxReadRuns)*serverHoleChunkSize)
	}
	return s.hdrs[:n*serverHoleChunkSize]
}

// serverTransmitState is the per-connection state of transmission: the
// free slots and the reply writer. Replies are written by whichever worker
// finds the writer idle ("flat combining"): it writes every reply queued
// meanwhile in one batch (one writev), then returns their slots to the
// free list. So each reply goes out in one piece, concurrent replies share
// a system call, and no goroutine waits just to write.
type serverTransmitState struct {
	free chan *serverSlot

	// The workers, started as requests need them, up to MaxInFlight:
	// an idle session costs no goroutine but its reader's.
	work    chan *serverSlot
	wg      sync.WaitGroup
	idle    atomic.Int32 // workers waiting for work that no request has claimed
	started int          // by the reader

	wmu      sync.Mutex
	writing  bool
	werr     error
	queue    []*serverSlot
	spare    []*serverSlot
	batch    *zerocopy.Batch
	timeout  time.Duration // Server.ReplyTimeout; 0: none
	deadline time.Time     // the write deadline set (writeBatch)
	views    [][]byte      // scratch of writeWindows

	share serverShare // the session's share of BufferMemory
}

// transmit serves requests until the client disconnects or the session
// fails. This goroutine reads requests; up to MaxInFlight workers serve
// them.
func (c *serverConn) transmit() error {
	c.srv.startSession(c)
	n := c.srv.maxInFlight()
	slots := make([]serverSlot, n)
	ts := &serverTransmitState{
		free:    make(chan *serverSlot, n),
		queue:   make([]*serverSlot, 0, n),
		spare:   make([]*serverSlot, 0, n),
		batch:   zerocopy.NewBatch(c.netc),
		timeout: c.srv.replyTimeout(),
	}
	ts.work = make(chan *serverSlot, n)
	if ts.share.limit = c.srv.budget.share; ts.share.limit > 0 {
		ts.share.wake = make(chan struct{}, 1)
	}
	for i := range slots {
		slots[i].ext = make([]Extent, 0, 64)
		slots[i].runs = make([]serverRun, 0, serverMaxReadRuns)
		ts.free <- &slots[i]
	}
	err := c.readRequests(ts)
	close(ts.work)
	ts.wg.Wait()
	ts.wmu.Lock()
	werr := ts.werr
	ts.wmu.Unlock()
	if err == nil || errors.Is(werr, ErrReplyTimeout) {
		// A reply timeout closed the connection under the reader: it is
		// the reason the session ended.
		err = werr
	}
	return err
}

// toWorker hands s to a worker: it claims an idle one, or starts one if
// fewer than MaxInFlight run. Counting claims, not waiting workers, makes
// sure every request handed over has a worker of its own: a worker that
// has just taken a request but not yet said so never counts as free.
// Called by the reader only.
func (c *serverConn) toWorker(ts *serverTransmitState, s *serverSlot) {
	if ts.idle.Add(-1) < 0 {
		ts.idle.Add(1)
		if ts.started < cap(ts.work) {
			ts.started++
			ts.wg.Add(1)
			go c.worker(ts)
		}
	}
	ts.work <- s
}

// worker serves the requests handed to it until the session ends. It
// starts claimed (by the request that started it) and counts itself idle
// before each later wait.
func (c *serverConn) worker(ts *serverTransmitState) {
	defer ts.wg.Done()
	for first := true; ; first = false {
		if !first {
			ts.idle.Add(1)
		}
		s, ok := <-ts.work
		if !ok {
			return
		}
		c.handle(ts, s) // its reply returns s to ts.free
	}
}

// handle serves one request and sends its reply.
func (c *serverConn) handle(ts *serverTransmitState, s *serverSlot) {
	if s.errno != 0 {
		c.sendError(ts, s, s.errno, s.msg)
		return
	}
	r := &s.req
	if e, msg := c.check(r); e != 0 {
		c.sendError(ts, s, e, msg)
		return
	}
	x := c.export
	ctx := c.ctx
	off, n := int64(r.Offset), int64(r.Length)
	fua := r.Flags.Has(FlagFUA) && x.flusher != nil
	switch r.Type {
	case CmdRead:
		start := time.Now()
		if c.lend {
			c.readLent(ts, s)
		} else if c.structured {
			c.readStructured(ts, s)
		} else {
			c.readSimple(ts, s)
		}
		average(&c.readNs, start)
	case CmdWrite:
		c.write(ts, s)
	case CmdFlush:
		c.finish(ts, s, x.flusher.Flush(ctx))
	case CmdTrim:
		err := x.trimmer.Trim(ctx, off, n)
		if err == nil && fua {
			err = x.flusher.Flush(ctx)
		}
		c.finish(ts, s, err)
	case CmdWriteZeroes:
		err := c.writeZeroes(r, off, n)
		if err == nil && fua {
			err = x.flusher.Flush(ctx)
		}
		c.finish(ts, s, err)
	case CmdCache:
		var err error
		if x.cacher != nil {
			err = x.cacher.Cache(ctx, off, n)
		}
		c.finish(ts, s, err)
	case CmdBlockStatus:
		c.blockStatus(ts, s)
	}
}

// write serves a WRITE whose payload is in s.
func (c *serverConn) write(ts *serverTransmitState, s *serverSlot) {
	x := c.export
	r := &s.req
	off := int64(r.Offset)
	fua := r.Flags.Has(FlagFUA) && x.flusher != nil
	start := time.Now()
	var err error
	switch {
	case s.paged && !(fua && x.fua != nil):
		err = c.takePages(s, off)
		if err == nil && fua {
			err = x.flusher.Flush(c.ctx)
		}
	case fua && x.fua != nil:
		err = c.writeAt(x.fuaAt, s, off)
	default:
		err = c.writeAt(x.Backend, s, off)
		if err == nil && fua {
			err = x.flusher.Flush(c.ctx)
		}
	}
	c.dropPayload(s)
	c.timeWrite(start)
	c.finish(ts, s, err)
}

// writeAt writes the payload of s at off through w: its pages with one
// WriteAt each, or its buffers with one WriteAt each.
func (c *serverConn) writeAt(w io.WriterAt, s *serverSlot, off int64) error {
	if !s.paged {
		_, err := s.data.WriteToAt(w, off)
		return err
	}
	for i, p := range s.pages {
		if _, err := w.WriteAt(p[:], off+int64(i)*PageSize); err != nil {
			return err
		}
	}
	return nil
}

// takesPages reports a write the reader reads into pages of its own: whole,
// aligned pages of a PageTaker.
func (c *serverConn) takesPages(s *serverSlot) bool {
	l := s.req.Length
	return c.export.pages != nil && l > 0 && l%PageSize == 0 && s.req.Offset%PageSize == 0
}

// takePages hands the slot's pages to the PageTaker in order, each taking
// back the page it replaced, which returns to the server's free pages
// (none on a first write: the next paged write allocates one, as WriteAt
// would have allocated the chunk). A page the PageTaker refuses is
// written with WriteAt instead.
func (c *serverConn) takePages(s *serverSlot, off int64) error {
	for i, p := range s.pages {
		at := off + int64(i)*PageSize
		old, ok := c.export.pages.TakePage(p, at)
		if !ok {
			if _, err := c.export.Backend.WriteAt(p[:], at); err != nil {
				return err
			}
			continue
		}
		s.pages[i] = old
		if old == nil {
			c.srv.bufs.gavePage()
		}
	}
	return nil
}

// dropPayload gives back what s's payload took: its buffers, its pages.
func (c *serverConn) dropPayload(s *serverSlot) {
	s.data.Release()
	for i, p := range s.pages {
		if p != nil {
			c.srv.bufs.putPage(p)
		}
		s.pages[i] = nil
	}
	s.pages = s.pages[:0]
	if cap(s.pages) > serverKeptPages {
		s.pages = nil // a huge write's list is not kept for the session
	}
	s.paged = false
}

// serverKeptPages bounds the list of pages a slot keeps between writes
// (2 MiB of them): a client's largest write would otherwise fix what
// every slot of its session holds (a 64 MiB write, 8 KiB of pointers).
// A larger write allocates its list.
const serverKeptPages = 2 * serverPageGroup

// timeWrite folds the duration of a backend write into the connection's
// moving average (weight 1/8), which inline consults.
func (c *serverConn) timeWrite(start time.Time) { average(&c.writeNs, start) }

// average folds the time since start into the moving average at avg
// (weight 1/8).
func average(avg *atomic.Int64, start time.Time) {
	d := int64(time.Since(start))
	for {
		old := avg.Load()
		if avg.CompareAndSwap(old, old+(d-old)/8) {
			return
		}
	}
}

// serverZeroes is written where a backend has no Zeroer.
var serverZeroes [64 << 10]byte

func (c *serverConn) writeZeroes(r *Request, off, n int64) error {
	x := c.export
	if x.zeroer != nil {
		err := x.zeroer.WriteZeroes(c.ctx, off, n, r.Flags&(FlagNoHole|FlagFastZero))
		// proto.md: without FlagFastZero the server MUST NOT fail with
		// ENOTSUP; fall back to writing zeroes.
		if err == nil || r.Flags.Has(FlagFastZero) || ErrnoOf(err) != ENOTSUP {
			return err
		}
	} else if r.Flags.Has(FlagFastZero) {
		return ENOTSUP // no faster than a write
	}
	for n > 0 {
		k := min(n, int64(len(serverZeroes)))
		if _, err := x.Backend.WriteAt(serverZeroes[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

func serverUitoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
