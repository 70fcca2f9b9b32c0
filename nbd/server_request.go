package nbd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// The reading side of transmission: request headers and write payloads,
// read into free slots and handed to the workers (or served at once).

// serverPayloadRetries is how many times a read of the rest of a large
// payload tries again at once when it finds nothing, before it parks:
// the client is in the middle of sending it (its send queued the first
// part), and parking costs two thread wake-ups where a few read(2)s cost
// less (BenchmarkServerWrite64KQD8 measures the difference).
const serverPayloadRetries = 5

// serverMaxHeld bounds the replies of requests the reader served itself
// that it holds back while the client is still sending, so the replies
// of a burst leave in one writev.
const serverMaxHeld = 4

// serverSockReader reads a socket with read(2) through its RawConn, so
// it learns when the next read would block: then, if pending reports
// replies held back, it returns from the descriptor's read lock, calls
// flush and tries again before it parks on the network poller. That is
// where the reader sends the replies of a burst: the client has nothing
// more to send until it gets them. (flush runs outside the read lock:
// a write failure closes the connection, and Close waits for the lock.)
//
// A payload read straight into its buffer (ReadPayload) also reads what
// follows it, up to a request header, into ahead (one readv of two
// pieces), as the client does with replies (client_raw.go): at depth a
// write then costs one system call, not two. ReadPages does the same
// with a group of pages.
type serverSockReader struct {
	rc      syscall.RawConn
	pending func() bool
	flush   func()
	try     func(fd uintptr) bool // r.read, bound once
	tryPeek func(fd uintptr) bool // r.peek, bound once
	one     [1]byte               // peek's buffer

	ahead []byte // read by ReadPayload beyond its payload, not yet Read
	abuf  [RequestSize]byte
	iov   [serverPageGroup + 1]syscall.Iovec // the readv of ReadPayload or ReadPages
	vec   []syscall.Iovec                    // read with readv into vec, not into p

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
	r.tryPeek = r.peek
	return r
}

func (r *serverSockReader) read(fd uintptr) bool {
	for {
		var n int
		var err error
		if r.vec != nil {
			n, err = sockRawReadv(fd, r.vec)
		} else {
			n, err = sockRawRead(fd, r.p)
		}
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

// peek waits for the socket to be readable: a byte to read, or its end.
func (r *serverSockReader) peek(fd uintptr) bool {
	for {
		n, err := sockRawPeek(fd, r.one[:])
		switch err {
		case nil:
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
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

// wait returns once the socket has bytes to read, without reading them,
// writing the replies held back if it has to wait.
func (r *serverSockReader) wait() error {
	if len(r.ahead) > 0 {
		return nil
	}
	for {
		r.err, r.blocked = nil, false
		if err := r.rc.Read(r.tryPeek); err != nil {
			return err
		}
		if !r.blocked {
			return r.err
		}
		r.flush()
	}
}

func (r *serverSockReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(r.ahead) > 0 {
		n := copy(p, r.ahead)
		r.ahead = r.ahead[n:]
		return n, nil
	}
	r.p = p
	defer func() { r.p = nil }()
	return r.readLoop()
}

// readLoop reads into r.p, or r.vec, writing the held replies whenever it
// would block.
func (r *serverSockReader) readLoop() (int, error) {
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

// ReadPayload reads into p like Read and, once p is full, into ahead in
// the same system call.
func (r *serverSockReader) ReadPayload(p []byte) (int, error) {
	if len(p) == 0 || len(r.ahead) > 0 {
		return r.Read(p)
	}
	r.iov[0] = serverIovec(p)
	return r.readVec(2, len(p))
}

// ReadPages reads into pages (at most serverPageGroup), from byte off of
// the first, like Read, and once they are full into ahead, in one readv.
func (r *serverSockReader) ReadPages(pages []*[PageSize]byte, off int) (int, error) {
	if len(r.ahead) > 0 {
		return r.Read(pages[0][off:])
	}
	want := 0
	for i, pg := range pages {
		p := pg[:]
		if i == 0 {
			p = p[off:]
		}
		r.iov[i] = serverIovec(p)
		want += len(p)
	}
	return r.readVec(len(pages)+1, want)
}

// readVec reads with one readv into the first n-1 pieces of r.iov, want
// bytes, and abuf, which it sets as the last piece; what lands in abuf is
// ahead.
func (r *serverSockReader) readVec(n, want int) (int, error) {
	r.iov[n-1] = serverIovec(r.abuf[:])
	r.vec = r.iov[:n]
	got, err := r.readLoop()
	r.vec = nil
	clear(r.iov[:n]) // keep no caller's buffer alive
	if got > want {
		r.ahead = r.abuf[:got-want]
		got = want
	}
	return got, err
}

func serverIovec(p []byte) syscall.Iovec {
	v := syscall.Iovec{Base: &p[0]}
	v.SetLen(len(p))
	return v
}

// serverReader is the request reader of one connection, run by the
// goroutine that called transmit.
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
type serverReader struct {
	c    *serverConn
	ts   *serverTransmitState
	rd   io.Reader         // the connection, or sock
	sock *serverSockReader // nil without a descriptor
	br   *bufio.Reader     // over rd

	idle     time.Duration // Server.IdleTimeout
	deadline bool          // a read deadline for idleness is set

	holding bool // the reader has the pen
	held    int  // requests served by the reader since the pen was taken
	big     bool // the last request was a write that bypassed br
	direct  bool // Read reads a payload straight from rd once br is empty
}

func (c *serverConn) newServerReader(ts *serverTransmitState) *serverReader {
	r := &serverReader{c: c, ts: ts, rd: c.netc, idle: c.srv.IdleTimeout}
	r.sock = newServerSockReader(c.netc, r.pending, r.release)
	if r.sock != nil {
		r.rd = r.sock
		// On a socket, replies to reads go out in a writev straight from
		// the backend's memory (through TLS they are copied into records
		// anyway).
		c.lend = c.export.lender != nil
	}
	r.br = bufio.NewReaderSize(r.rd, 64<<10)
	return r
}

func (r *serverReader) pending() bool { return r.holding }

// release writes the replies held back and puts the pen down.
func (r *serverReader) release() {
	r.held = 0
	if r.holding {
		r.holding = false
		r.c.releasePen(r.ts)
	}
}

// readRequests reads request headers and write payloads into free slots
// and hands them to the workers. It returns nil on NBD_CMD_DISC, on a
// client that hangs up between requests, and when Shutdown stops it.
func (c *serverConn) readRequests(ts *serverTransmitState) error {
	r := c.newServerReader(ts)
	defer r.release()
	for {
		s, err := r.nextSlot()
		if err != nil {
			return err
		}
		if c.srv.inShutdown.Load() {
			ts.free <- s
			r.refuseBuffered()
			return nil
		}
		if err := r.readRequest(s); err != nil {
			c.endRequest(s)
			c.dropPayload(s)
			c.unreserve(ts, s)
			ts.free <- s
			if err == errServerStopped {
				return nil
			}
			return err
		}
		r.dispatch(s)
	}
}

// refuseBuffered answers NBD_ESHUTDOWN to every whole request the reader
// has buffered but not started, once Shutdown has begun, without reading
// the socket again.
func (r *serverReader) refuseBuffered() {
	br := r.br
	for br.Buffered() >= RequestSize {
		s, err := r.nextSlot()
		if err != nil {
			return
		}
		hdr, _ := br.Peek(RequestSize)
		copy(s.hdr[:], hdr)
		bad := s.req.Parse(&s.hdr) != nil
		n := RequestSize
		if s.req.Type == CmdWrite {
			n += int(min(s.req.Length, serverDiscardLimit+1))
		}
		if bad || s.req.Type == CmdDisc || br.Buffered() < n {
			r.ts.free <- s
			return
		}
		br.Discard(n)
		s.errno, s.msg, s.paged, s.reserved = ESHUTDOWN, "server shutting down", false, 0
		r.c.handle(r.ts, s)
	}
}

// nextSlot takes a free slot, writing the held replies first if it has
// to wait for one.
func (r *serverReader) nextSlot() (*serverSlot, error) {
	select {
	case s := <-r.ts.free:
		return s, nil
	default:
	}
	r.release()
	select {
	case s := <-r.ts.free:
		return s, nil
	case <-r.c.ctx.Done():
		return nil, r.c.ctx.Err()
	}
}

// readRequest reads the next request into s: its header and, for a
// write, its payload. A request the server answers with an error without
// serving it has s.errno set.
func (r *serverReader) readRequest(s *serverSlot) error {
	c, br := r.c, r.br
	if br.Buffered() < RequestSize && !(r.sock != nil && r.big) {
		r.release()
	}
	if r.idle > 0 {
		r.watchIdle(len(r.ts.free) == cap(r.ts.free)-1)
	}
	var err error
	if r.big && br.Buffered() == 0 {
		// After a large write, read the next header alone: through the
		// buffer, the read would take the next payload with it and copy
		// it twice.
		_, err = io.ReadFull(r.rd, s.hdr[:])
	} else {
		_, err = io.ReadFull(br, s.hdr[:])
	}
	if err != nil {
		return c.readError(err, false)
	}
	if err := s.req.Parse(&s.hdr); err != nil {
		return err // proto.md: bad magic, hard disconnect
	}
	c.active.Add(1)
	s.counted = true
	s.errno, s.msg, s.paged = 0, "", false
	r.big = s.req.Type == CmdWrite && int(s.req.Length) >= br.Size()/2
	if err := r.awaitShare(s); err != nil {
		return err
	}
	if err := r.reserve(s); err != nil {
		return err
	}
	switch s.req.Type {
	case CmdDisc:
		// proto.md: handle all outstanding requests, then close.
		return errServerHangUp
	case CmdWrite:
		return r.readWrite(s)
	}
	return nil
}

// reserve reserves the budget of the buffers s may take, before any is
// taken: a read's reply (unless sent from a Lender's memory), a block
// status reply. A write reserves its buffers one at a time as its
// payload arrives (reservePiece); a request past the maximum payload
// takes none: it is refused.
func (r *serverReader) reserve(s *serverSlot) error {
	c := r.c
	var n int64
	switch s.req.Type {
	case CmdRead:
		if s.req.Length <= c.export.maxPayload && !c.lend {
			n = serverNeed(int64(s.req.Length))
		}
	case CmdBlockStatus:
		n = serverSmallBuf
	}
	s.reserved = 0
	return r.reservePiece(s, n)
}

// reservePiece adds n bytes to the reservation of s. While it waits, the
// reader writes the replies it holds back: their requests' reservations
// end once written.
func (r *serverReader) reservePiece(s *serverSlot, n int64) error {
	if n == 0 {
		return nil
	}
	if err := r.c.srv.budget.reserve(r.c.ctx, n, &s.ticket, r.release); err != nil {
		return err
	}
	s.reserved += n
	r.ts.share.add(n)
	return nil
}

// readWrite reads the payload of write s: into a page the backend takes
// over, into the slot's buffer, or, past the maximum payload, nowhere.
func (r *serverReader) readWrite(s *serverSlot) error {
	c, br := r.c, r.br
	l := s.req.Length
	if br.Buffered() < int(min(l, serverDiscardLimit)) && !(r.sock != nil && r.big) {
		r.release()
	}
	var err error
	switch {
	case l > c.export.maxPayload:
		// proto.md allows a hard disconnect for a payload large enough to
		// be a denial of service, but not below 2^25.
		if l > serverDiscardLimit {
			return &ProtocolError{Msg: "write payload of " + serverUitoa(uint64(l)) + " bytes"}
		}
		_, err = io.CopyN(io.Discard, br, int64(l))
		s.errno, s.msg = EINVAL, "write longer than the maximum payload"
	case c.takesPages(s):
		// Whole pages of a PageTaker: read into pages of the server's,
		// which the backend keeps instead of copying them.
		s.paged = true
		err = r.readPayloadPages(s, int64(l))
	default:
		// Into pooled buffers, one at a time as the payload arrives.
		s.data.Init(c.srv.bufs.pool(int64(l)))
		err = r.readPayloadBuffers(s, int64(l))
	}
	if err != nil {
		return c.readError(err, true)
	}
	return nil
}

// dispatch serves s itself or hands it to a worker.
func (r *serverReader) dispatch(s *serverSlot) {
	c, br := r.c, r.br
	quick := c.quickRead(s)
	if quick || br.Buffered() < RequestSize && c.inline(s, len(r.ts.free) == cap(r.ts.free)-1) {
		if (r.sock != nil && r.big || quick && s.req.Length <= serverInlineWrite && br.Buffered() >= RequestSize) && !r.holding {
			// Replies of a burst of small reads served here go out
			// together; a large one goes at once.
			r.holding = c.takePen(r.ts)
		}
		c.handle(r.ts, s)
		if r.held++; r.held >= serverMaxHeld {
			r.release()
		}
		return
	}
	if !r.holding {
		r.holding = c.takePen(r.ts)
	}
	r.c.toWorker(r.ts, s)
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
// included, serving the next one here costs less than waking a worker
// (BenchmarkServerRead4KQD32 and BenchmarkServerRead64KQD8 compare the
// two). A backend whose reads are slow gets them overlapped on the workers
// again.
func (c *serverConn) quickRead(s *serverSlot) bool {
	return s.req.Type == CmdRead && s.errno == 0 && c.readNs.Load() < serverInlineBudget
}

// serverPageGroup is how many pages of a payload the reader reserves,
// takes and reads at once: 1 MiB, a large buffer's worth.
const serverPageGroup = serverLargeBuf / PageSize

// readPayloadPages reads a payload of n bytes, a multiple of PageSize,
// into pages appended to s.pages, serverPageGroup at a time, each group
// reserved and taken once the first of its bytes has arrived (as
// readPayloadBuffers does with buffers) and read in as few system calls
// as its bytes arrive in.
func (r *serverReader) readPayloadPages(s *serverSlot, n int64) error {
	r.startPayload(int(min(n, 1<<30)))
	defer r.endPayload()
	for n > 0 {
		k := int(min(n/PageSize, serverPageGroup))
		if err := r.awaitPayload(); err != nil {
			return err
		}
		first := len(s.pages)
		for range k {
			// A page at a time: trimFor keeps the free pages for
			// reservations of a page.
			if err := r.reservePiece(s, PageSize); err != nil {
				return err
			}
			s.pages = append(s.pages, r.c.srv.bufs.getPage())
		}
		if err := r.readPages(s.pages[first:]); err != nil {
			return err
		}
		n -= int64(k) * PageSize
	}
	return nil
}

// readPages fills pages with the payload's next bytes: what br holds
// first, then straight from the socket, several pages a system call.
func (r *serverReader) readPages(pages []*[PageSize]byte) error {
	for i, off := 0, 0; ; {
		var n int
		var err error
		if r.sock != nil && r.direct && r.br.Buffered() == 0 {
			n, err = r.sock.ReadPages(pages[i:], off)
		} else {
			n, err = r.Read(pages[i][off:])
		}
		off += n
		i, off = i+off/PageSize, off%PageSize
		switch {
		case i == len(pages):
			return nil
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
}

// readPayloadBuffers reads a payload of n bytes into new buffers at the
// end of s.data, one buffer at a time, each reserved once the first of
// its bytes has arrived: a client that stalls holds the buffers of what
// it has sent, no more.
func (r *serverReader) readPayloadBuffers(s *serverSlot, n int64) error {
	r.startPayload(int(min(n, 1<<30)))
	defer r.endPayload()
	piece := int64(serverSmallBuf)
	if n > serverSmallBuf {
		piece = serverLargeBuf
	}
	for n > 0 {
		k := min(n, piece)
		if err := r.awaitPayload(); err != nil {
			return err
		}
		if err := r.reservePiece(s, piece); err != nil {
			return err
		}
		if _, err := s.data.ReadFromN(r, k); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n -= k
	}
	return nil
}

// awaitPayload returns once the next bytes of a payload have arrived
// (or the connection fails), without reading them from the socket.
func (r *serverReader) awaitPayload() error {
	switch {
	case r.br.Buffered() > 0:
		return nil
	case r.sock != nil:
		return r.sock.wait()
	}
	r.release() // Peek may block
	_, err := r.br.Peek(1)
	return err
}

// startPayload prepares Read for a payload of n bytes: a large one is
// read from what br has buffered, then straight from rd (br's reader), so
// it is copied once, not twice.
func (r *serverReader) startPayload(n int) {
	r.direct = n >= r.br.Size()/2
	if r.direct && r.sock != nil {
		r.sock.rest, r.sock.retries = true, 0
	}
}

func (r *serverReader) endPayload() {
	r.direct = false
	if r.sock != nil {
		r.sock.rest = false
	}
}

// Read reads a payload (between startPayload and endPayload).
func (r *serverReader) Read(p []byte) (int, error) {
	switch {
	case !r.direct || r.br.Buffered() > 0:
		return r.br.Read(p)
	case r.sock != nil:
		return r.sock.ReadPayload(p)
	}
	return r.rd.Read(p)
}

// errServerStopped is readError's verdict on a read that Shutdown
// stopped: the reader ends without an error.
var errServerStopped = errors.New("nbd: reading stopped by Shutdown")

// watchIdle sets a read deadline IdleTimeout away when no request is in
// flight (idle), and clears it otherwise: a client waiting for replies
// may rightly send nothing. Shutdown's deadline (now) is kept.
func (r *serverReader) watchIdle(idle bool) {
	nc := r.c.netc
	switch {
	case idle:
		nc.SetReadDeadline(time.Now().Add(r.idle))
	case r.deadline:
		nc.SetReadDeadline(time.Time{})
	default:
		return
	}
	r.deadline = idle
	if r.c.srv.inShutdown.Load() || r.c.evicted.Load() {
		// Shutdown or eviction may have set its deadline before this one.
		nc.SetReadDeadline(time.Now())
	}
}

// errServerIdle ends a session that was idle for IdleTimeout.
var errServerIdle = fmt.Errorf("%w: idle timeout", errServerHangUp)

// errServerEvicted ends an idle session closed to make room for a new one.
var errServerEvicted = fmt.Errorf("%w: idle session evicted for a new connection", errServerHangUp)

// endRequest marks the request of s ended for the idleness eviction
// watches.
func (c *serverConn) endRequest(s *serverSlot) {
	if s.counted {
		s.counted = false
		c.lastActive.Store(time.Now().UnixNano())
		c.active.Add(-1)
	}
}

// readError classifies a failed read: a client gone between requests
// (errServerHangUp) or a read stopped by Shutdown (errServerStopped) is a
// normal end.
func (c *serverConn) readError(err error, midRequest bool) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if c.srv.inShutdown.Load() {
			return errServerStopped
		}
		if c.evicted.Load() {
			return errServerEvicted
		}
		if c.srv.IdleTimeout > 0 {
			return errServerIdle
		}
	}
	if err == io.EOF && !midRequest {
		return errServerHangUp
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
