package nbd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/zerocopy"
)

// The transmission engine of one connection.
//
// Each connection has a fixed table of request slots (WithMaxInFlight). A
// caller takes a free slot from a buffered channel (waiting there is the
// backpressure), fills it, sends the request header and payload (in one
// write when alone, in one writev with the other requests queued at the
// same moment otherwise: client_write.go), and waits for its reply.
// Nothing is allocated per request: slots, headers, write vectors and
// channels are made once per connection.
//
// There is no reader goroutine. Replies are read by whichever waiting
// caller holds the reader role (a token channel of capacity one), leader
// and followers: the leader reads replies one at a time, finds each one's
// slot from the cookie (slot index in the low 32 bits, a generation in the
// high 32), reads the data straight into that caller's buffer, wakes it,
// and stops leading as soon as its own reply is complete; a waiting
// follower then takes the role. At queue depth one the caller reads its
// own reply, with no goroutine hand-off on the way. Every request in
// flight always has a waiter that can lead: its caller, or, once the
// caller has given up (context ended), a short-lived drain goroutine.
//
// A slot's mutex is held by the leader while it writes into the caller's
// buffer and by a caller whose context ends; so a caller that gives up
// either finds its reply complete, or marks the slot abandoned knowing no
// one will touch its buffer again (the leader then discards the reply's
// data and frees the slot itself).
//
// Deadlines hold in every phase. Waiting for a slot, for the write lock
// and for a reply are selects on the context. A write blocked when the
// context ends is cut by a write deadline: a request none of which went out
// is taken back and the connection lives; a request half on the wire
// cannot be, so the connection is closed and every later call fails with
// "nbd: connection lost: sending ...". A read is cut by a read deadline
// whatever the reader is doing (before a header, mid-header, mid-payload,
// mid-chunk): the reader keeps where it is in the message (clientBody),
// the caller whose context ended returns at once, and the next leader (a
// waiting caller, or the drain goroutine of the abandoned request) reads
// the rest of the message, discarding what was meant for a caller who
// gave up. So an abandoned reply never costs the connection: the stream
// stays in step, and other requests go on.
//
// A caller whose context ends while the leader is writing into its buffer
// sets its slot's cancel flag and cuts the leader's read with a deadline;
// the leader sees the flag, lets go of the buffer (the rest of that data
// is discarded) and of the slot's mutex, which the caller then takes.
// Deadline changes and the checks of why a read was cut are ordered by
// kickMu, so no cut is lost.

// clientReplyBuffer is the size of the reader's bufio.Reader. Payloads at
// least this long are read straight into the caller's buffer; shorter ones
// pass through it, so one read syscall can carry many small replies.
const clientReplyBuffer = 256 << 10

// clientDirectRead is the payload size from which reply data is read
// from the socket straight into the caller's buffer rather than through
// the bufio.Reader (which batches small replies into one syscall).
const clientDirectRead = 32 << 10

// clientHeaderRead is how much the reader reads ahead for a reply header
// after a large payload: a chunk header and an OFFSET_DATA offset.
const clientHeaderRead = ChunkHeaderSize + OffsetDataHeaderSize

// clientMaxStatusChunk bounds one BLOCK_STATUS chunk (about 128k extents).
const clientMaxStatusChunk = 1 << 20

// clientMaxErrorChunk bounds an error chunk: error, length, a message of at
// most 4096 bytes, offset.
const clientMaxErrorChunk = 6 + MaxStringLength + 8

// clientMaxUnknownErrorChunk bounds an error chunk of a type this package
// does not know; it is read and discarded.
const clientMaxUnknownErrorChunk = 64 << 10

type clientSlot struct {
	idx  uint32
	done chan struct{} // capacity 1: the reader (or fail) signals completion

	cancel atomic.Bool // the caller gave up: the reader must let go of buf
	parked atomic.Bool // the caller is blocked waiting for its reply

	mu        sync.Mutex
	cookie    uint64
	gen       uint32
	inflight  bool
	complete  bool
	abandoned bool
	cmd       Command
	flags     CmdFlags
	off       uint64
	length    uint32
	buf       []byte // READ destination, len == length
	err       error

	// READ with structured replies: the byte ranges covered so far.
	covered uint64
	ivals   []clientIval
	// BLOCK_STATUS: extents of every context, and where each context's
	// run starts in them.
	ext     []Extent
	extRuns []clientExtentRun

	hdr    [RequestSize]byte
	wbuf   []byte        // WRITE payload, until the request is sent
	wstate atomic.Uint32 // clientW*: where the request is on its way out; changed under clientConn.wmu
	wdone  chan struct{} // capacity 1: a hint that a writer settled the request (sent or put back)
}

type clientIval struct{ lo, hi uint64 }

type clientExtentRun struct {
	id         uint32
	start, end int
}

type clientConn struct {
	nc         net.Conn
	br         *bufio.Reader
	structured bool
	contexts   []MetaContext
	canWritev  bool

	slots []clientSlot
	free  chan uint32
	wsem  chan struct{} // capacity 1: held by the writer (see client_write.go)
	woken atomic.Int32  // callers woken by a reply that have not run yet

	wmu     sync.Mutex      // guards wq and the wstate transitions
	wq      []*clientSlot   // requests queued to be written, in order
	wbatch  []*clientSlot   // the writer's: the requests it is writing
	wvec    [][]byte        // the writer's: their headers and payloads
	wb      *zerocopy.Batch // the writer's: wvec written to a socket (raw writev on Linux)
	wkickMu sync.Mutex      // guards writing, wkicked and write deadline changes
	writing bool            // a writev is in progress
	wkicked bool            // and was cut

	wbatches int // the writer's: batches written (tests count them)

	dead   chan struct{}
	failMu sync.Mutex
	err    error         // why the connection died; set before dead is closed
	rtok   chan struct{} // capacity 1: held by the leader (the one reading replies)

	// Soft disconnect and Shutdown (client_softdisc.go).
	shut     atomic.Bool   // a reply said ESHUTDOWN: refuse new requests
	shutWait time.Duration // how long the soft disconnect waits (< 0: for ever)
	qsem     chan struct{} // capacity 1: held by the one quiescing
	held     int           // slots the quiescers took for good (under qsem)

	kickMu sync.Mutex  // orders read deadline changes with the checks of why a read was cut
	rwatch clientWatch // cuts the leader's read when its caller's context ends
	wwatch clientWatch // cuts the writer's writev when its caller's context ends

	// owned by the leader
	raw        *clientRawSock // raw reads of a socket (nil: TLS, a pipe)
	spin       clientSpin     // the spin for a reply at depth one
	ahead      []byte         // bytes read after a direct payload, not yet in br
	headerOnly bool           // the last payload was large: read no further than a header
	body       clientBody
	rfix       [OffsetHoleSize]byte // fixed-size chunk payloads
	scratch    []byte
}

func newClientConn(nc net.Conn, structured bool, contexts []MetaContext, inflight int) *clientConn {
	c := &clientConn{
		nc:         nc,
		structured: structured,
		contexts:   contexts,
		slots:      make([]clientSlot, inflight),
		free:       make(chan uint32, inflight),
		wsem:       make(chan struct{}, 1),
		wq:         make([]*clientSlot, 0, inflight),
		wbatch:     make([]*clientSlot, 0, inflight),
		wvec:       make([][]byte, 0, 2*inflight),
		dead:       make(chan struct{}),
		rtok:       make(chan struct{}, 1),
		qsem:       make(chan struct{}, 1),
	}
	c.rwatch.kick, c.wwatch.kick = c.kick, c.wkick
	c.br = bufio.NewReaderSize(clientSock{c}, clientReplyBuffer)
	c.raw = newClientRawSock(nc)
	c.wb = zerocopy.NewBatch(nc)
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		c.canWritev = true
	}
	// Each slot's first READ would grow its list of covered ranges: give
	// every slot room for a few from one array now, so that no request
	// allocates until a reply comes in more pieces than that.
	ivals := make([]clientIval, clientSlotIvals*len(c.slots))
	for i := range c.slots {
		s := &c.slots[i]
		s.idx = uint32(i)
		s.ivals = ivals[i*clientSlotIvals : i*clientSlotIvals : (i+1)*clientSlotIvals]
		s.done = make(chan struct{}, 1)
		s.wdone = make(chan struct{}, 1)
		c.free <- uint32(i)
	}
	return c
}

// failed returns the connection's error if it is dead.
func (c *clientConn) failed() error {
	select {
	case <-c.dead:
		return c.err
	default:
		return nil
	}
}

// fail kills the connection: every request in flight gets err (the first
// one given) at once, and so does every later call.
func (c *clientConn) fail(err error) {
	c.failMu.Lock()
	select {
	case <-c.dead:
		c.failMu.Unlock()
		return
	default:
	}
	c.err = err
	close(c.dead)
	c.failMu.Unlock()
	_ = c.nc.Close()
	c.rwatch.close()
	c.wwatch.close()
	select {
	case c.wsem <- struct{}{}: // no writer: close the pipe of spliced writes
		c.wb.SetSplice(0)
		<-c.wsem
	default: // a writer's: it goes with the connection (a cleanup closes it)
	}
	for i := range c.slots {
		s := &c.slots[i]
		s.mu.Lock()
		if s.inflight && !s.complete {
			c.completeLocked(s, err)
		}
		s.mu.Unlock()
	}
}

// completeLocked finishes s with err. The caller holds s.mu.
func (c *clientConn) completeLocked(s *clientSlot, err error) {
	s.err = err
	s.complete = true
	if s.abandoned {
		c.resetLocked(s)
		c.free <- s.idx
		return
	}
	if s.parked.Swap(false) {
		c.woken.Add(1) // until the caller runs: see client_write.go
	}
	s.done <- struct{}{}
}

func (c *clientConn) resetLocked(s *clientSlot) {
	s.inflight, s.complete, s.abandoned = false, false, false
	s.cancel.Store(false)
	s.buf, s.err, s.wbuf = nil, nil, nil
	s.wstate.Store(clientWIdle)
	s.covered = 0
	s.ivals = s.ivals[:0]
	s.ext = s.ext[:0]
	s.extRuns = s.extRuns[:0]
}

// acquire takes a free slot, waiting for one (backpressure) until ctx ends
// or the connection dies. Once a soft disconnect has begun it refuses
// with ErrServerShutdown.
func (c *clientConn) acquire(ctx context.Context) (*clientSlot, error) {
	if err := c.failed(); err != nil {
		return nil, err
	}
	if err := c.refused(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case i := <-c.free:
		return c.take(i)
	default:
	}
	select {
	case i := <-c.free:
		return c.take(i)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.dead:
		return nil, c.err
	}
}

// take returns slot i, just taken from c.free, or gives it back if a soft
// disconnect has begun.
func (c *clientConn) take(i uint32) (*clientSlot, error) {
	if err := c.refused(); err != nil {
		c.free <- i
		return nil, err
	}
	return &c.slots[i], nil
}

// tryAcquire takes a free slot if there is one.
func (c *clientConn) tryAcquire() *clientSlot {
	select {
	case i := <-c.free:
		s, _ := c.take(i)
		return s
	default:
		return nil
	}
}

// release gives back a slot whose result the caller has taken.
func (c *clientConn) release(s *clientSlot) {
	s.mu.Lock()
	c.resetLocked(s)
	s.mu.Unlock()
	c.free <- s.idx
}

// wait waits for the reply to the request in s and returns its error,
// leading (reading replies for everyone) while no one else does. If ctx
// ends first, s is abandoned (whoever reads its reply frees it) and wait
// returns ctx's error with abandoned true; otherwise the caller still holds
// s and must release it.
func (c *clientConn) wait(ctx context.Context, s *clientSlot) (err error, abandoned bool) {
	for ctx.Err() == nil {
		select {
		case <-s.done:
			return s.err, false
		default:
		}
		s.parked.Store(true)
		select {
		case <-s.done:
			c.unpark(s)
			return s.err, false
		case c.rtok <- struct{}{}:
			c.unpark(s)
			c.lead(ctx, s, s.cookie)
			<-c.rtok
		case <-ctx.Done():
			c.unpark(s)
		}
	}
	// Ask the leader to let go of the buffer, cutting its read if it is
	// filling it, and wait until it has.
	s.cancel.Store(true)
	if !s.mu.TryLock() {
		c.kick()
		s.mu.Lock()
	}
	if s.complete {
		s.mu.Unlock()
		<-s.done
		return s.err, false
	}
	s.abandoned = true
	s.buf = nil
	cookie := s.cookie
	s.mu.Unlock()
	// Someone must read the abandoned reply even if no other call ever
	// waits on this connection again.
	go c.drain(s, cookie)
	return ctx.Err(), true
}

// unpark ends a caller's wait for its reply, taking it out of c.woken if
// the reader counted it there.
func (c *clientConn) unpark(s *clientSlot) {
	if !s.parked.Swap(false) {
		c.woken.Add(-1)
	}
}

// kick cuts the reader's current or next read with a deadline in the past.
func (c *clientConn) kick() {
	c.kickMu.Lock()
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	c.kickMu.Unlock()
}

// unkick clears the read deadline after a cut; the reader then checks why
// it was cut (its context, a slot's cancel flag).
func (c *clientConn) unkick() {
	c.kickMu.Lock()
	_ = c.nc.SetReadDeadline(time.Time{})
	c.kickMu.Unlock()
}

// drain waits (leading when it can) until the abandoned request cookie in
// s is answered or the connection dies.
func (c *clientConn) drain(s *clientSlot, cookie uint64) {
	for !c.answered(s, cookie) {
		select {
		case <-c.dead:
			return
		case c.rtok <- struct{}{}:
			c.lead(context.Background(), s, cookie)
			<-c.rtok
		}
	}
}

// answered reports whether the request cookie in s is no longer waiting
// for its reply.
func (c *clientConn) answered(s *clientSlot, cookie uint64) bool {
	s.mu.Lock()
	d := !s.inflight || s.complete || s.cookie != cookie
	s.mu.Unlock()
	return d
}

// lead reads replies, the caller holding the reader role, until the
// request cookie in s is answered, the connection dies, or ctx ends (at
// once, even mid-message: the next leader reads the rest).
func (c *clientConn) lead(ctx context.Context, s *clientSlot, cookie uint64) {
	watched := c.rwatch.begin(ctx)
	for c.failed() == nil && ctx.Err() == nil && !c.answered(s, cookie) {
		err := c.readReply(ctx)
		if err == nil {
			continue
		}
		if errors.Is(err, errClientInterrupted) {
			// Cut at a message boundary: ctx ended (checked by the
			// loop), or a stale deadline of a caller that gave up.
			c.unkick()
			continue
		}
		if errors.Is(err, errClientLeave) {
			break
		}
		c.dropBody()
		c.fail(clientConnLost(err))
		break
	}
	if watched && c.rwatch.end() {
		// ctx's end set the deadline: clear it so it cannot cut the
		// next leader's read.
		c.unkick()
	}
}

// ErrConnectionLost is the error of every request in flight, and of every
// later call, on a connection that broke: the server hung up, a read or
// write failed, or a request was cut by its context after part of it had
// gone out (it cannot be taken back, so the connection is closed). A
// protocol violation fails the connection with a *ProtocolError instead.
// A soft disconnect that stops waiting for replies
// (WithSoftDisconnectTimeout) fails its connection with an error that
// matches both this and ErrServerShutdown.
var ErrConnectionLost = errors.New("nbd: connection lost")

func clientConnLost(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: server hung up: %w", ErrConnectionLost, io.ErrUnexpectedEOF)
	}
	if errors.Is(err, ErrProtocol) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, err)
}

// do runs one request to completion and releases its slot.
func (c *clientConn) do(ctx context.Context, cmd Command, flags CmdFlags, off uint64, length uint32, wbuf, rbuf []byte) error {
	s, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	if err := c.start(ctx, s, cmd, flags, off, length, wbuf, rbuf); err != nil {
		return err
	}
	err, abandoned := c.wait(ctx, s)
	if !abandoned {
		c.release(s)
	}
	return err
}

// close sends NBD_CMD_DISC (best effort) and closes the connection; every
// request still in flight fails with err. The write lock is held from the
// DISC until the connection is dead, so no request queued meanwhile can
// follow the DISC onto the wire (proto.md: "A client MUST NOT send
// anything to the server after sending an NBD_CMD_DISC command").
func (c *clientConn) close(err error) {
	if c.failed() == nil {
		select {
		case c.wsem <- struct{}{}:
			var h [RequestSize]byte
			r := Request{Type: CmdDisc}
			r.Put(&h)
			_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.nc.Write(h[:])
			c.wb.SetSplice(0) // fail leaves a held write lock's pipe alone
			c.fail(err)
			<-c.wsem
			return
		case <-time.After(time.Second):
		}
	}
	c.fail(err)
}

// clientMaxFragments bounds the separate pieces a READ reply may be in
// (after merging adjacent ones), so a server sending tiny chunks out of
// order cannot make the client allocate in proportion to the request.
const clientMaxFragments = 1 << 14

// clientSlotIvals is the covered ranges each slot has room for from the
// start: a READ's reply in up to this many separate pieces at once.
const clientSlotIvals = 4

// clientMaxExtents bounds the extents of one BLOCK_STATUS reply over all
// contexts.
const clientMaxExtents = 1 << 20

// cover records [off, off+n) of a READ reply, failing if it is outside the
// request or overlaps what came before. The covered ranges are kept sorted
// and merged, so chunks in any order of one contiguous run cost one entry.
func (s *clientSlot) cover(off, n uint64) error {
	end := off + n
	if off < s.off || end < off || end > s.off+uint64(s.length) {
		return protoErr(fmt.Sprintf("chunk [%d, +%d) outside the READ [%d, +%d)", off, n, s.off, s.length))
	}
	iv := s.ivals
	i, j := 0, len(iv) // first range starting at or after end
	for i < j {
		h := int(uint(i+j) >> 1)
		if iv[h].lo < end {
			i = h + 1
		} else {
			j = h
		}
	}
	// iv[i-1] is the last range starting before end: it must end by off.
	if i > 0 && iv[i-1].hi > off {
		return protoErr(fmt.Sprintf("chunk [%d, +%d) overlaps [%d, %d)", off, n, iv[i-1].lo, iv[i-1].hi))
	}
	joinPrev := i > 0 && iv[i-1].hi == off
	joinNext := i < len(iv) && iv[i].lo == end
	switch {
	case joinPrev && joinNext:
		iv[i-1].hi = iv[i].hi
		s.ivals = append(iv[:i], iv[i+1:]...)
	case joinPrev:
		iv[i-1].hi = end
	case joinNext:
		iv[i].lo = off
	default:
		if len(iv) >= clientMaxFragments {
			return protoErr(fmt.Sprintf("READ reply in more than %d pieces", clientMaxFragments))
		}
		iv = append(iv, clientIval{})
		copy(iv[i+1:], iv[i:])
		iv[i] = clientIval{off, end}
		s.ivals = iv
	}
	s.covered += n
	return nil
}

// addExtents records a BLOCK_STATUS payload for slot s.
func (s *clientSlot) addExtents(contexts []MetaContext, b []byte) error {
	start := len(s.ext)
	if start+(len(b)-BlockStatusHeaderSize)/ExtentSize > clientMaxExtents {
		return protoErr(fmt.Sprintf("BLOCK_STATUS reply of more than %d extents", clientMaxExtents))
	}
	id, ext, err := ParseBlockStatus(b, s.ext)
	s.ext = ext
	if err != nil {
		s.ext = s.ext[:start]
		return err
	}
	known := false
	for _, m := range contexts {
		if m.ID == id {
			known = true
			break
		}
	}
	if !known {
		s.ext = s.ext[:start]
		return protoErr(fmt.Sprintf("block status for context id %d, which was not negotiated", id))
	}
	for _, r := range s.extRuns {
		if r.id == id {
			s.ext = s.ext[:start]
			return protoErr(fmt.Sprintf("block status for context id %d sent twice", id))
		}
	}
	if s.flags.Has(FlagReqOne) && len(s.ext)-start != 1 {
		s.ext = s.ext[:start]
		return protoErr(fmt.Sprintf("%d extents under REQ_ONE", len(ext)-start))
	}
	s.extRuns = append(s.extRuns, clientExtentRun{id: id, start: start, end: len(s.ext)})
	return nil
}

// ServerError is an error chunk of a structured reply: the server's error
// value, its message, and for ERROR_OFFSET the offset it applies to.
// errors.Is(err, syscall.EIO) works through Errno.
type ServerError struct {
	Errno     Errno
	Message   string
	Offset    uint64
	HasOffset bool
}

func (e *ServerError) Error() string {
	s := e.Errno.Error()
	if e.HasOffset {
		s += fmt.Sprintf(" at offset %d", e.Offset)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns the Errno.
func (e *ServerError) Unwrap() error { return e.Errno }
