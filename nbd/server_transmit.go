package nbd

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// serverHeadroom is the space kept in front of a request's data in its
// slot buffer: a structured chunk header and the OFFSET_DATA offset, so a
// read reply (simple or structured) is header and data in one contiguous
// buffer, sent with one Write.
const serverHeadroom = ChunkHeaderSize + OffsetDataHeaderSize

// serverHoleChunkSize is the size of a whole OFFSET_HOLE chunk.
const serverHoleChunkSize = ChunkHeaderSize + OffsetHoleSize

// serverInlineWrite is the largest write the reader serves itself
// without looking at how fast the backend writes.
const serverInlineWrite = 8 << 10

// serverInlineBudget is the average backend write time under which the
// reader serves larger writes itself.
const serverInlineBudget = int64(50 * time.Microsecond)

// serverMaxMessage bounds the message of an error chunk.
const serverMaxMessage = 128

// serverPayloadRetries is how many times a read of the rest of a large
// payload tries again at once when it finds nothing, before it parks:
// the client is in the middle of sending it (its send queued the first
// part), and parking costs two thread wake-ups where a few read(2)s cost
// a microsecond or two.
const serverPayloadRetries = 5

// serverMaxHeld bounds the replies of requests the reader served itself
// that it holds back while the client is still sending, so the replies
// of a burst leave in one writev.
const serverMaxHeld = 4

// serverSlot is one request in flight and everything it needs: its header,
// its buffer (payload in, reply out) and scratch space. A connection owns
// MaxInFlight slots and reuses them, so steady state allocates nothing.
type serverSlot struct {
	hdr   [RequestSize]byte
	req   Request
	errno Errno  // set by the reader when the request already failed
	msg   string // ... and why
	buf   []byte
	out   []byte // the reply, until written
	ext   []Extent
	runs  []serverRun
	small [ChunkHeaderSize + 6 + serverMaxMessage]byte
	page  *[MemDiskChunkSize]byte // a whole-chunk write's payload, or nil
	paged bool                    // this request's payload is in page

	// A read sent from the MemDisk's memory: the reply's pieces (headers
	// in buf, data lent by the disk) and the range lent, until written.
	iov   [][]byte
	views [][]byte
	lent  [2]int64 // offset, length; length 0: nothing lent
}

// serverRun is a piece of a structured read reply: data or a hole.
type serverRun struct {
	off  uint64
	n    uint32
	hole bool
}

// grow returns the slot's buffer with length n, reallocating only when it
// is too small.
func (s *serverSlot) grow(n int) []byte {
	if cap(s.buf) < n {
		// Round up to 64 KiB so slightly larger requests reuse it.
		s.buf = make([]byte, (n+(64<<10)-1)&^((64<<10)-1))
	}
	return s.buf[:n]
}

// serverTransmitState is the per-connection state of transmission: the
// free slots and the reply writer. Replies are written by whichever worker
// finds the writer idle ("flat combining"): it writes every reply queued
// meanwhile with one writev, then returns their slots to the free list. So
// each reply goes out in one piece, concurrent replies share a system
// call, and no goroutine waits just to write.
type serverTransmitState struct {
	free chan *serverSlot

	wmu     sync.Mutex
	writing bool
	werr    error
	queue   []*serverSlot
	spare   []*serverSlot
	bufs    [][]byte
	nb      net.Buffers      // bufs, as writeReplies' writev consumes it
	raw     *serverRawWriter // on a socket (Linux): writev without the runtime
}

// serverSockReader reads a socket with read(2) through its RawConn, so
// it learns when the next read would block: then, if pending reports
// replies held back, it returns from the descriptor's read lock, calls
// flush and tries again before it parks on the network poller. That is
// where the reader sends the replies of a burst: the client has nothing
// more to send until it gets them. (flush runs outside the read lock:
// a write failure closes the connection, and Close waits for the lock.)
type serverSockReader struct {
	rc      syscall.RawConn
	pending func() bool
	flush   func()
	try     func(fd uintptr) bool // r.read, bound once

	p       []byte
	n       int
	err     error
	blocked bool
	rest    bool // reading the rest of a payload: retry before parking
	retries int
}

// newServerSockReader returns nil for a connection without a descriptor
// (TLS, net.Pipe): those flush before every read instead.
func newServerSockReader(nc net.Conn, pending func() bool, flush func()) *serverSockReader {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &serverSockReader{rc: rc, pending: pending, flush: flush}
	r.try = r.read
	return r
}

func (r *serverSockReader) read(fd uintptr) bool {
	for {
		n, err := serverRawRead(fd, r.p)
		switch err {
		case nil:
			r.n = n
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.rest && r.retries < serverPayloadRetries {
				r.retries++
				continue
			}
			if r.pending() {
				r.blocked = true
				return true
			}
			return false // park until readable
		}
		r.err = err
		return true
	}
}

func (r *serverSockReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	defer func() { r.p = nil }()
	for {
		r.n, r.err, r.blocked = 0, nil, false
		if err := r.rc.Read(r.try); err != nil {
			return 0, err // closed, or Shutdown's deadline
		}
		if !r.blocked {
			return r.n, r.err
		}
		r.flush()
	}
}

// transmit serves requests until the client disconnects or the session
// fails. This goroutine reads requests; MaxInFlight workers serve them.
func (c *serverConn) transmit() error {
	n := c.srv.maxInFlight()
	slots := make([]serverSlot, n)
	ts := &serverTransmitState{
		free:  make(chan *serverSlot, n),
		queue: make([]*serverSlot, 0, n),
		spare: make([]*serverSlot, 0, n),
		bufs:  make([][]byte, 0, n),
	}
	work := make(chan *serverSlot, n)
	for i := range slots {
		slots[i].ext = make([]Extent, 0, 64)
		slots[i].runs = make([]serverRun, 0, serverMaxReadRuns)
		ts.free <- &slots[i]
	}
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		go func() {
			defer wg.Done()
			for s := range work {
				c.handle(ts, s) // its reply returns s to ts.free
			}
		}()
	}
	err := c.readRequests(ts, work)
	close(work)
	wg.Wait()
	if err == nil {
		ts.wmu.Lock()
		err = ts.werr
		ts.wmu.Unlock()
	}
	return err
}

// readRequests reads request headers and write payloads into free slots
// and hands them to the workers. It returns nil on NBD_CMD_DISC, on a
// client that hangs up between requests, and when Shutdown stops it.
//
// While more requests are already buffered, the reader holds the reply
// writer ("the pen"): replies finished meanwhile queue up and go out
// together in one writev when the burst is dispatched. It puts the pen
// down before anything that may block (a read from the network, waiting
// for a free slot), so no reply waits on the client or on itself. Large
// writes on a socket are the exception: the reader serves them itself
// and holds their replies (and any others) while the client is still
// sending, until serverSockReader finds nothing to read or serverMaxHeld
// are held, so they leave in one writev and wake the client once.
func (c *serverConn) readRequests(ts *serverTransmitState, work chan *serverSlot) (err error) {
	free := ts.free
	maxPayload := c.export.maxPayload
	holding := false
	held := 0    // requests served by the reader since the pen was taken
	big := false // the last request was a write that bypassed br
	release := func() {
		held = 0
		if holding {
			holding = false
			c.releasePen(ts)
		}
	}
	defer release()
	var rd io.Reader = c.netc
	sock := newServerSockReader(c.netc, func() bool { return holding }, release)
	if sock != nil {
		rd = sock
		// On a socket, replies to reads go out in a writev straight from
		// a MemDisk (through TLS they are copied into records anyway).
		c.lend = c.export.pages != nil
		ts.wmu.Lock()
		ts.raw = newServerRawWriter(sock.rc, 2*cap(ts.bufs))
		ts.wmu.Unlock()
	}
	br := bufio.NewReaderSize(rd, 64<<10)
	for {
		var s *serverSlot
		select {
		case s = <-free:
		default:
			release()
			select {
			case s = <-free:
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
		}
		if br.Buffered() < RequestSize && !(sock != nil && big) {
			release()
		}
		var rerr error
		if big && br.Buffered() == 0 {
			// After a large write, read the next header alone: through
			// the buffer, the read would take the next payload with it
			// and copy it twice.
			_, rerr = io.ReadFull(rd, s.hdr[:])
		} else {
			_, rerr = io.ReadFull(br, s.hdr[:])
		}
		if rerr != nil {
			free <- s
			return c.readError(rerr, false)
		}
		if err := s.req.Parse(&s.hdr); err != nil {
			free <- s
			return err // proto.md: bad magic, hard disconnect
		}
		s.errno, s.msg, s.paged = 0, "", false
		big = s.req.Type == CmdWrite && int(s.req.Length) >= br.Size()/2
		switch s.req.Type {
		case CmdDisc:
			// proto.md: handle all outstanding requests, then close.
			free <- s
			return errServerHangUp
		case CmdWrite:
			l := s.req.Length
			if br.Buffered() < int(min(l, serverDiscardLimit)) && !(sock != nil && big) {
				release()
			}
			if l > maxPayload {
				// proto.md allows a hard disconnect for a payload large
				// enough to be a denial of service, but not below 2^25.
				if l > serverDiscardLimit {
					free <- s
					return &ProtocolError{Msg: "write payload of " + serverUitoa(uint64(l)) + " bytes"}
				}
				if _, err := io.CopyN(io.Discard, br, int64(l)); err != nil {
					free <- s
					return c.readError(err, true)
				}
				s.errno, s.msg = EINVAL, "write longer than the maximum payload"
			} else if c.export.pages != nil && l == MemDiskChunkSize && s.req.Offset%MemDiskChunkSize == 0 {
				// A whole chunk of a MemDisk: read it into a page of its
				// own, which the disk keeps instead of copying it.
				if s.page == nil {
					s.page = new([MemDiskChunkSize]byte)
				}
				s.paged = true
				if err := c.readPayload(br, rd, s.page[:]); err != nil {
					free <- s
					return c.readError(err, true)
				}
			} else {
				b := s.grow(serverHeadroom + int(l))
				if err := c.readPayload(br, rd, b[serverHeadroom:]); err != nil {
					free <- s
					return c.readError(err, true)
				}
			}
		}
		quick := c.quickRead(s)
		if quick || br.Buffered() < RequestSize && c.inline(s, len(free) == cap(free)-1) {
			if (sock != nil && big || quick && s.req.Length <= serverInlineWrite && br.Buffered() >= RequestSize) && !holding {
				// Replies of a burst of small reads served here go out
				// together; a large one goes at once.
				holding = c.takePen(ts)
			}
			c.handle(ts, s)
			if held++; held >= serverMaxHeld {
				release()
			}
			continue
		}
		if !holding {
			holding = c.takePen(ts)
		}
		work <- s
	}
}

// inline decides whether the reader serves s itself, nothing more being
// buffered: rather than wake a worker it serves a request when no other is
// in flight (a client waiting for this reply sends nothing meanwhile), and
// a write without FUA while the backend's recent writes have been quick
// (its payload bypassed the buffer, so more requests may be waiting on the
// socket, but a quick copy costs less than a worker's wake-up). Slow
// backends keep their writes on the workers, overlapping the next read.
func (c *serverConn) inline(s *serverSlot, alone bool) bool {
	if s.req.Type == CmdWrite && s.req.Length > serverInlineWrite {
		return s.errno == 0 && !s.req.Flags.Has(FlagFUA) && c.writeNs.Load() < serverInlineBudget
	}
	return alone
}

// quickRead reports a READ the reader serves itself even with more requests
// waiting: while the connection's reads have been served quickly, reply
// included, serving the next one here costs less than waking a worker (on a
// 2-vCPU VM a wake-up on the other core takes about 10 us, a 64 KiB read
// from memory and its reply about as much). A backend whose reads are slow
// gets them overlapped on the workers again.
func (c *serverConn) quickRead(s *serverSlot) bool {
	return s.req.Type == CmdRead && s.errno == 0 && c.readNs.Load() < serverInlineBudget
}

// takePen makes the caller the reply writer if no one is writing: sends
// queue their replies until releasePen.
func (c *serverConn) takePen(ts *serverTransmitState) bool {
	ts.wmu.Lock()
	defer ts.wmu.Unlock()
	if ts.writing {
		return false
	}
	ts.writing = true
	return true
}

// releasePen writes every queued reply and puts the pen down.
func (c *serverConn) releasePen(ts *serverTransmitState) {
	ts.wmu.Lock()
	c.writeQueued(ts)
}

// readPayload fills p: first from what br has buffered, then straight
// from rd (br's reader), so a large payload is copied once, not twice.
func (c *serverConn) readPayload(br *bufio.Reader, rd io.Reader, p []byte) error {
	if len(p) < br.Size()/2 {
		_, err := io.ReadFull(br, p)
		return err
	}
	n := br.Buffered()
	if n > len(p) {
		n = len(p)
	}
	if n > 0 {
		b, _ := br.Peek(n)
		copy(p, b)
		br.Discard(n)
	}
	if r, ok := rd.(*serverSockReader); ok {
		r.rest, r.retries = true, 0
		defer func() { r.rest = false }()
	}
	_, err := io.ReadFull(rd, p[n:])
	return err
}

// readError classifies a failed read: a client gone between requests or a
// read stopped by Shutdown is a normal end.
func (c *serverConn) readError(err error, midRequest bool) error {
	if c.srv.inShutdown.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err == io.EOF && !midRequest {
		return errServerHangUp
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// send queues the reply b of slot s; the slot is returned to the free
// list once b is written. After the first write failure the connection is
// closed (which stops the reader) and later replies are dropped.
func (c *serverConn) send(ts *serverTransmitState, s *serverSlot, b []byte) {
	s.out = b
	ts.wmu.Lock()
	ts.queue = append(ts.queue, s)
	if ts.writing {
		ts.wmu.Unlock()
		return
	}
	ts.writing = true
	c.writeQueued(ts)
}

// writeQueued writes the queue, batch by batch, until it is empty, and
// puts the pen down. It is called with wmu held and the pen taken, and
// returns with wmu released.
func (c *serverConn) writeQueued(ts *serverTransmitState) {
	for len(ts.queue) > 0 {
		batch := ts.queue
		ts.queue, ts.spare = ts.spare[:0], batch
		failed := ts.werr != nil
		ts.wmu.Unlock()
		var err error
		if !failed {
			err = c.writeReplies(ts, batch)
		}
		for _, q := range batch {
			c.sent(q)
			ts.free <- q
		}
		ts.wmu.Lock()
		if err != nil && ts.werr == nil {
			ts.werr = err
			c.netc.Close()
		}
	}
	ts.writing = false
	ts.wmu.Unlock()
}

// sent forgets the reply of q, written or dropped, and gives back what
// the disk lent it.
func (c *serverConn) sent(q *serverSlot) {
	q.out = nil
	if len(q.iov) > 0 {
		clear(q.iov) // keep no chunk alive
		q.iov = q.iov[:0]
	}
	if q.lent[1] > 0 {
		clear(q.views)
		q.views = q.views[:0]
		c.export.pages.giveBack(q.lent[0], q.lent[1])
		q.lent[1] = 0
	}
}

// writeReplies writes whole replies: one Write for one in one piece, one
// writev otherwise (net.Buffers on a socket; a Write each elsewhere, as
// on TLS).
func (c *serverConn) writeReplies(ts *serverTransmitState, batch []*serverSlot) error {
	if len(batch) == 1 && len(batch[0].iov) == 0 && ts.raw == nil {
		_, err := c.netc.Write(batch[0].out)
		return err
	}
	bufs := ts.bufs[:0]
	for _, q := range batch {
		if len(q.iov) > 0 {
			bufs = append(bufs, q.iov...)
		} else {
			bufs = append(bufs, q.out)
		}
	}
	ts.bufs = bufs
	if ts.raw != nil {
		err := ts.raw.writev(bufs)
		clear(bufs)
		return err
	}
	// WriteTo consumes the Buffers it is called on; a local one would
	// escape (the method has a pointer receiver) and cost an allocation
	// per batch, so the state keeps it.
	ts.nb = bufs
	_, err := ts.nb.WriteTo(c.netc)
	ts.nb = nil
	clear(bufs) // keep no lent chunk alive
	return err
}

func (c *serverConn) sendOK(ts *serverTransmitState, s *serverSlot) {
	b := (*[SimpleReplySize]byte)(s.small[:SimpleReplySize])
	r := SimpleReply{Cookie: s.req.Cookie}
	r.Put(b)
	c.send(ts, s, b[:])
}

// sendError answers with e: a structured ERROR chunk with a message once
// structured replies are negotiated (required for READ, preferred for the
// rest), a simple reply otherwise.
func (c *serverConn) sendError(ts *serverTransmitState, s *serverSlot, e Errno, msg string) {
	if !c.structured {
		b := (*[SimpleReplySize]byte)(s.small[:SimpleReplySize])
		r := SimpleReply{Error: e, Cookie: s.req.Cookie}
		r.Put(b)
		c.send(ts, s, b[:])
		return
	}
	if msg == "" {
		msg = e.Syscall().Error()
	}
	if len(msg) > serverMaxMessage {
		msg = msg[:serverMaxMessage]
	}
	n := ChunkHeaderSize + 6 + len(msg)
	b := s.small[:n]
	h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkError, Cookie: s.req.Cookie, Length: uint32(6 + len(msg))}
	h.Put((*[ChunkHeaderSize]byte)(b))
	binary.BigEndian.PutUint32(b[ChunkHeaderSize:], uint32(e))
	binary.BigEndian.PutUint16(b[ChunkHeaderSize+4:], uint16(len(msg)))
	copy(b[ChunkHeaderSize+6:], msg)
	c.send(ts, s, b)
}

func (c *serverConn) finish(ts *serverTransmitState, s *serverSlot, err error) {
	if err != nil {
		c.sendError(ts, s, ErrnoOf(err), "")
		return
	}
	c.sendOK(ts, s)
}

// check validates a request against the export and what was negotiated
// (proto.md, "Error values"): EINVAL for unknown commands, flags not
// valid for the command, features not advertised, reads and trims past
// the end and misaligned requests; ENOSPC for writes past the end; EPERM
// for changes to a read-only export.
func (c *serverConn) check(r *Request) (Errno, string) {
	x := c.export
	allowed := CmdFlags(0)
	if c.flags.Has(ExportSendFUA) {
		allowed |= FlagFUA
	}
	switch r.Type {
	case CmdRead:
		if c.structured {
			allowed |= FlagDF
		}
	case CmdWriteZeroes:
		allowed |= FlagNoHole | FlagFastZero
	case CmdBlockStatus:
		allowed |= FlagReqOne
	case CmdWrite, CmdFlush, CmdTrim, CmdCache:
	default:
		return EINVAL, "unknown command"
	}
	if r.Flags&^allowed != 0 {
		return EINVAL, "command flag not valid here"
	}
	switch r.Type {
	case CmdWrite, CmdTrim, CmdWriteZeroes:
		if x.ReadOnly {
			return EPERM, "export is read-only"
		}
	}
	switch r.Type {
	case CmdFlush:
		if x.flusher == nil {
			return EINVAL, "flush not supported"
		}
		if r.Offset != 0 || r.Length != 0 {
			return EINVAL, "flush with nonzero offset or length"
		}
		return 0, ""
	case CmdTrim:
		if x.trimmer == nil {
			return EINVAL, "trim not supported"
		}
	case CmdBlockStatus:
		if !c.statusOK {
			return EINVAL, "no metadata context negotiated"
		}
		if r.Length == 0 {
			return EINVAL, "block status of length 0"
		}
	}
	off, n := r.Offset, uint64(r.Length)
	if off > x.size || n > x.size-off {
		if r.Type == CmdWrite || r.Type == CmdWriteZeroes {
			return ENOSPC, "write past the end of the export"
		}
		return EINVAL, "request past the end of the export"
	}
	if x.minBlock > 1 && (off|n)&uint64(x.minBlock-1) != 0 {
		return EINVAL, "request not aligned to the minimum block size"
	}
	switch r.Type {
	case CmdRead:
		if r.Length > x.maxPayload {
			if r.Flags.Has(FlagDF) {
				return EOVERFLOW, "read too large to send unfragmented"
			}
			return EINVAL, "read longer than the maximum payload"
		}
	case CmdCache:
		if r.Length > x.maxPayload {
			return EINVAL, "cache longer than the maximum payload"
		}
	}
	return 0, ""
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
		start := time.Now()
		var err error
		var p []byte
		if s.paged {
			p = s.page[:]
		} else {
			p = s.buf[serverHeadroom : serverHeadroom+int(n)]
		}
		switch {
		case s.paged && !(fua && x.fua != nil) && c.takePage(s, off):
			if fua {
				err = x.flusher.Flush(ctx)
			}
		case fua && x.fua != nil:
			_, err = x.fua.WriteAtFUA(p, off)
		default:
			_, err = x.Backend.WriteAt(p, off)
			if err == nil && fua {
				err = x.flusher.Flush(ctx)
			}
		}
		c.timeWrite(start)
		c.finish(ts, s, err)
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

// takePage hands the slot's page to the MemDisk and takes back the chunk
// it replaced (none on a first write: the next whole-chunk write
// allocates a page, as WriteAt would have allocated the chunk).
func (c *serverConn) takePage(s *serverSlot, off int64) bool {
	old, ok := c.export.pages.takePage(s.page, off)
	if ok {
		s.page = old
	}
	return ok
}

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

func (c *serverConn) readSimple(ts *serverTransmitState, s *serverSlot) {
	n := int(s.req.Length)
	b := s.grow(serverHeadroom + n)
	if n > 0 {
		if _, err := c.export.Backend.ReadAt(b[serverHeadroom:], int64(s.req.Offset)); err != nil {
			c.sendError(ts, s, ErrnoOf(err), "")
			return
		}
	}
	h := b[serverHeadroom-SimpleReplySize : serverHeadroom]
	r := SimpleReply{Cookie: s.req.Cookie}
	r.Put((*[SimpleReplySize]byte)(h))
	c.send(ts, s, b[serverHeadroom-SimpleReplySize:])
}

// readStructured answers a READ with OFFSET_DATA chunks for data and
// OFFSET_HOLE chunks for ranges the backend reports as reading zero, all
// laid out in the slot's buffer and sent with one Write. Everything is
// read before anything is sent, so the last content chunk carries DONE.
func (c *serverConn) readStructured(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	if r.Length == 0 {
		b := s.small[:ChunkHeaderSize]
		h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkNone, Cookie: r.Cookie}
		h.Put((*[ChunkHeaderSize]byte)(b))
		c.send(ts, s, b)
		return
	}
	runs := c.readRuns(s)
	b := s.grow(serverHeadroom + int(r.Length) + serverHoleChunkSize*len(runs))
	pos := 0
	for i, run := range runs {
		var flags ReplyFlags
		if i == len(runs)-1 {
			flags = ReplyFlagDone
		}
		if run.hole {
			h := ChunkHeader{Flags: flags, Type: ChunkOffsetHole, Cookie: r.Cookie, Length: OffsetHoleSize}
			h.Put((*[ChunkHeaderSize]byte)(b[pos:]))
			PutOffsetHole((*[OffsetHoleSize]byte)(b[pos+ChunkHeaderSize:]), run.off, run.n)
			pos += serverHoleChunkSize
			continue
		}
		h := ChunkHeader{Flags: flags, Type: ChunkOffsetData, Cookie: r.Cookie, Length: OffsetDataHeaderSize + run.n}
		h.Put((*[ChunkHeaderSize]byte)(b[pos:]))
		binary.BigEndian.PutUint64(b[pos+ChunkHeaderSize:], run.off)
		pos += serverHeadroom
		if _, err := c.export.Backend.ReadAt(b[pos:pos+int(run.n)], int64(run.off)); err != nil {
			c.sendError(ts, s, ErrnoOf(err), "")
			return
		}
		pos += int(run.n)
	}
	c.send(ts, s, b[:pos])
}

// readLent answers a READ from a MemDisk's own memory: the disk lends the
// chunks the read covers and the reply goes out as headers and those
// chunks in one writev, with no copy before the socket's. It sends what
// readStructured and readSimple send, byte for byte: holes as OFFSET_HOLE
// chunks (structured) or zeroes (simple).
func (c *serverConn) readLent(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	if r.Length == 0 {
		if c.structured {
			c.readStructured(ts, s)
		} else {
			c.readSimple(ts, s)
		}
		return
	}
	off, n := int64(r.Offset), int64(r.Length)
	views := c.export.pages.lend(off, n, s.views[:0])
	s.views = views
	s.lent = [2]int64{off, n}
	// Holes (nil views) become zeroes of their length, and every piece an
	// extent, so a structured reply splits into runs as readRuns splits a
	// backend's block status.
	ext := s.ext[:0]
	for i, at := 0, off; i < len(views); i++ {
		k := min(MemDiskChunkSize-at%MemDiskChunkSize, off+n-at)
		var f ExtentFlags
		if views[i] == nil {
			views[i], f = serverZeroes[:k], ExtentHole|ExtentZero
		}
		ext = append(ext, Extent{Length: uint32(k), Flags: f})
		at += k
	}
	if cap(ext) <= serverMaxExtents {
		s.ext = ext[:0]
	}
	iov := s.iov[:0]
	if !c.structured {
		h := s.small[:SimpleReplySize]
		rep := SimpleReply{Cookie: r.Cookie}
		rep.Put((*[SimpleReplySize]byte)(h))
		s.iov = append(append(iov, h), views...)
		c.send(ts, s, nil)
		return
	}
	runs := serverSplitRuns(s.runs[:0], r, ext)
	hdrs := s.grow(len(runs) * serverHoleChunkSize)
	pos, i := 0, 0 // in hdrs, in views
	for k, run := range runs {
		var flags ReplyFlags
		if k == len(runs)-1 {
			flags = ReplyFlagDone
		}
		if run.hole {
			b := hdrs[pos : pos+serverHoleChunkSize]
			h := ChunkHeader{Flags: flags, Type: ChunkOffsetHole, Cookie: r.Cookie, Length: OffsetHoleSize}
			h.Put((*[ChunkHeaderSize]byte)(b))
			PutOffsetHole((*[OffsetHoleSize]byte)(b[ChunkHeaderSize:]), run.off, run.n)
			iov = append(iov, b)
			pos += serverHoleChunkSize
			for left := int(run.n); left > 0; i++ {
				left -= int(ext[i].Length)
			}
			continue
		}
		b := hdrs[pos : pos+serverHeadroom]
		h := ChunkHeader{Flags: flags, Type: ChunkOffsetData, Cookie: r.Cookie, Length: OffsetDataHeaderSize + run.n}
		h.Put((*[ChunkHeaderSize]byte)(b))
		binary.BigEndian.PutUint64(b[ChunkHeaderSize:], run.off)
		iov = append(iov, b)
		pos += serverHeadroom
		for left := int(run.n); left > 0; i++ {
			iov = append(iov, views[i])
			left -= len(views[i])
		}
	}
	s.iov = iov
	c.send(ts, s, nil)
}

// readRuns splits a read into data and hole runs from the backend's
// block status; without one the whole read is one data run.
func (c *serverConn) readRuns(s *serverSlot) []serverRun {
	r := &s.req
	runs := s.runs[:0]
	x := c.export
	if x.status == nil {
		return append(runs, serverRun{off: r.Offset, n: r.Length})
	}
	ext, err := x.status.BlockStatus(c.ctx, int64(r.Offset), int64(r.Length), s.ext[:0])
	if cap(ext) <= serverMaxExtents {
		s.ext = ext[:0]
	}
	if err != nil {
		return append(runs, serverRun{off: r.Offset, n: r.Length})
	}
	return serverSplitRuns(runs, r, ext)
}

// serverSplitRuns appends to runs the data and hole runs of read r that
// extents ext describe (ExtentZero: a hole), at most serverMaxReadRuns:
// past that, and past the extents, the rest is data. Under FlagDF a read
// with any data is one data run.
func serverSplitRuns(runs []serverRun, r *Request, ext []Extent) []serverRun {
	start := len(runs)
	off, end := r.Offset, r.Offset+uint64(r.Length)
	for _, e := range ext {
		if e.Length == 0 || off >= end {
			break
		}
		n := min(uint64(e.Length), end-off)
		hole := e.Flags.Has(ExtentZero)
		if k := len(runs); k > start && runs[k-1].hole == hole {
			runs[k-1].n += uint32(n)
		} else {
			if len(runs)-start == serverMaxReadRuns-1 {
				break
			}
			runs = append(runs, serverRun{off: off, n: uint32(n), hole: hole})
		}
		off += n
	}
	if off < end {
		if k := len(runs); k > start && !runs[k-1].hole {
			runs[k-1].n += uint32(end - off)
		} else {
			runs = append(runs, serverRun{off: off, n: uint32(end - off)})
		}
	}
	// proto.md: under DF at most one content chunk, and a range with both
	// data and holes MUST go as data.
	if r.Flags.Has(FlagDF) && len(runs)-start > 1 {
		return append(runs[:start], serverRun{off: r.Offset, n: r.Length})
	}
	return runs
}

// blockStatus answers NBD_CMD_BLOCK_STATUS with one BLOCK_STATUS chunk for
// base:allocation, describing at most serverBlockStatusWindow bytes in at
// most serverMaxExtents descriptors, none past the request.
func (c *serverConn) blockStatus(ts *serverTransmitState, s *serverSlot) {
	r := &s.req
	x := c.export
	want := uint64(min(r.Length, serverBlockStatusWindow))
	var ext []Extent
	if x.status != nil {
		var err error
		ext, err = x.status.BlockStatus(c.ctx, int64(r.Offset), int64(want), s.ext[:0])
		if cap(ext) <= serverMaxExtents {
			s.ext = ext[:0]
		}
		if err != nil {
			c.sendError(ts, s, ErrnoOf(err), "")
			return
		}
	}
	// Clean what the backend gave: no empty extents, nothing past the
	// request, neighbours with equal flags merged, bounded count.
	out := ext[:0]
	var sum uint64
	for _, e := range ext {
		if e.Length == 0 || sum >= want {
			continue
		}
		if n := uint64(e.Length); n > want-sum {
			e.Length = uint32(want - sum)
		}
		sum += uint64(e.Length)
		if k := len(out); k > 0 && out[k-1].Flags == e.Flags {
			out[k-1].Length += e.Length
			continue
		}
		if len(out) == serverMaxExtents {
			break
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		out = append(s.ext[:0], Extent{Length: uint32(want)})
	}
	if r.Flags.Has(FlagReqOne) {
		out = out[:1]
	}
	n := ChunkHeaderSize + BlockStatusHeaderSize + ExtentSize*len(out)
	b := s.grow(n)[:ChunkHeaderSize]
	h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkBlockStatus, Cookie: r.Cookie, Length: uint32(n - ChunkHeaderSize)}
	h.Put((*[ChunkHeaderSize]byte)(b))
	b = AppendBlockStatus(b, serverMetaContextID, out)
	c.send(ts, s, b)
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
