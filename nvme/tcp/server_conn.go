package tcp

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/zerocopy"
)

// Slot states.
const (
	slotFree = iota
	slotData // waiting for H2CData after an R2T
	slotBusy // running, or its completion is being sent
	slotHeld // an AER the controller keeps
)

// Kinds of work for the writer, in the high bits of an item.
const (
	kindResp = 1 << 16 // the slot's completion (with C2HData first for a read)
	kindR2T  = 2 << 16 // an R2T for the slot's data
	kindTerm = 3 << 16 // the C2HTermReq in conn.term, then nothing more
)

// slot is one entry of a queue: the command, its data buffer and the
// headers the writer sends for it.
type slot struct {
	cmd   nvme.Command
	cpl   nvme.Completion
	buf   []byte
	n     int // data length
	got   int // H2C data received
	state uint8
	bad   bool                          // an H2CData digest failed
	hdr   [HeaderSize + DigestSize]byte // C2HData or R2T
	resp  [HeaderSize + DigestSize]byte
	ddgst [DigestSize]byte
	// A read sent from the backend's memory: the pieces lent and their
	// loan, until the completion is written.
	pieces []nbd.LentPiece
	loan   nvme.Loan
	arg    []byte // the data of a command handed to a worker
	// A write of whole pages that the backend takes (nvme.Queue.WritePages):
	// its data is pages, not buf. The pages the backend gives back stay for
	// the slot's next such write.
	pages []*[nbd.PageSize]byte
	paged bool
	// A command started on an asynchronous backend (nvme.Queue.Start),
	// for a worker to finish, and when it started.
	pend    nvme.Pending
	started bool
	t0      time.Time
}

// data returns the slot's buffer cut to n bytes, growing it (to a power
// of two) when needed.
func (sl *slot) data(n int) []byte {
	if cap(sl.buf) < n {
		c := 4096
		for c < n {
			c <<= 1
		}
		sl.buf = make([]byte, c)
	}
	sl.n = n
	return sl.buf[:n]
}

// conn is one connection of a Server: one queue.
type conn struct {
	s           *Server
	nc          net.Conn
	q           *nvme.Queue
	maxTransfer int
	r           *pduReader
	f           framing
	slots       []slot
	freeMu      sync.Mutex
	freeStack   []uint16      // free slots, the last freed on top
	freeSig     chan struct{} // a slot was freed

	// The idle trim (server_idle.go), under freeMu: the commands that
	// took a slot, their count when the check was armed or last ran, the
	// check's timer, whether trimming is on and the check armed.
	taken     uint64
	trimSeen  uint64
	trimTimer *time.Timer
	trimOn    bool
	trimArmed bool

	// Workers (server_run.go), for the I/O queue of a slow backend.
	work    chan uint16 // commands for the workers; nil on the admin queue
	workers int         // started (reader only)
	idle    atomic.Int32
	waiting atomic.Int32 // handed to the workers and not yet taken
	wg      sync.WaitGroup
	execNs  atomic.Int64  // moving average of a command's Exec
	sqhd    atomic.Uint32 // the SQ head after the last command taken (sqHead)
	src     *sockReader   // what r reads through
	pieces  [][]byte      // readPagesDirect's readv (maxReadPieces)

	// The pen (server_send.go): under wmu, the queue of items to write,
	// whether someone writes them, the first write error.
	wmu     sync.Mutex
	queue   []uint32
	spare   []uint32
	writing bool
	werr    error
	holding bool // the reader holds the pen (reader only)
	held    int  // completions queued while the reader held it

	// Owned by the pen's holder.
	snd     wire
	freed   [maxIOV]uint16 // slots whose completion is staged
	nfree   int
	term    [HeaderSize + MaxTermData]byte
	termLen int

	ev connEvents // the queue's nvme.Transport
}

func (c *conn) serve() error {
	c.src = newSockReader(c)
	c.pieces = make([][]byte, 0, maxReadPieces)
	c.r = newPDUReader(c.src, max(c.maxTransfer, adminInCapsule))
	c.snd.batch = zerocopy.NewBatch(c.nc)
	c.snd.nc, c.snd.views = c.nc, make([][]byte, 0, maxIOV)
	c.nc.SetDeadline(time.Now().Add(c.s.handshakeTimeout()))
	c.setSlots(1)
	err := c.icResp()
	for err == nil && !c.q.Connected() {
		if err = c.r.next(); err == nil {
			if c.r.h.Type != TypeCapsuleCmd {
				err = fatal(FESSequence, 0, c.r.h.Type.String()+" before Connect")
			} else {
				err = c.command()
			}
		}
	}
	if err == nil {
		c.nc.SetDeadline(time.Time{})
		// The pen is down (Connect's completion went out): from here on
		// writes are bounded by ReplyTimeout, not HandshakeTimeout.
		c.snd.timeout = c.s.replyTimeout()
		c.setSlots(c.q.Size())
		c.startTrim()
		c.held = 0 // Connect's completion went out
		if c.q.ID() != 0 {
			c.work = make(chan uint16, len(c.slots))
		}
		err = c.loop()
	}
	c.stopTrim()
	c.stopWorkers()
	c.release()
	if werr := c.writeErr(); errors.Is(werr, ErrReplyTimeout) {
		err = werr // it closed the connection under the reader
	}
	c.fail(err)
	c.ev.close()
	for i := range c.slots {
		c.slots[i].loan.GiveBack() // of completions never staged
	}
	c.linger()
	c.nc.Close()
	c.ev.wait()
	c.q.Close()
	return err
}

func (c *conn) setSlots(n int) {
	c.freeMu.Lock() // freeBytes may look
	c.slots = make([]slot, n)
	c.freeStack = make([]uint16, n)
	for i := range n {
		c.freeStack[i] = uint16(n - 1 - i)
	}
	c.freeMu.Unlock()
	c.freeSig = make(chan struct{}, 1)
	c.queue = make([]uint32, 0, 2*n+2)
	c.spare = make([]uint32, 0, 2*n+2)
}

// freeSlot returns slot i to the free stack: the slot freed last is taken
// first, so a queue kept shallow by its host reuses the same few buffers
// (and an idle queue's are let go: armTrim).
func (c *conn) freeSlot(i uint16) {
	c.freeMu.Lock()
	c.freeStack = append(c.freeStack, i)
	c.armTrim(i)
	c.freeMu.Unlock()
	select {
	case c.freeSig <- struct{}{}:
	default:
	}
}

func (c *conn) popSlot() (uint16, bool) {
	c.freeMu.Lock()
	defer c.freeMu.Unlock()
	n := len(c.freeStack)
	if n == 0 {
		return 0, false
	}
	i := c.freeStack[n-1]
	c.freeStack = c.freeStack[:n-1]
	c.taken++
	return i, true
}

// loop reads PDUs until the connection ends. It holds the pen while the
// host is still sending (on a socket, from each PDU read until sockReader
// finds the socket empty; otherwise, while the next PDU is buffered
// whole), and at most until maxHeld completions wait.
func (c *conn) loop() error {
	deadline := false // the admin queue's read deadline is set
	for {
		if c.src.rc == nil && !c.buffered() {
			if err := c.release(); err != nil {
				return err
			}
		}
		if c.q.ID() == 0 {
			deadline = c.keepAliveDeadline(deadline)
		}
		if err := c.r.next(); err != nil {
			if err == io.EOF {
				return errHostClosed
			}
			return err
		}
		if c.src.rc != nil {
			// Hold the pen before the command runs, not after, so that
			// its completion waits for those of the commands behind it
			// rather than go out alone (sockReader puts the pen down
			// before it parks).
			c.hold()
		}
		var err error
		switch c.r.h.Type {
		case TypeCapsuleCmd:
			err = c.command()
		case TypeH2CData:
			err = c.h2cData()
		case TypeH2CTermReq:
			var t TermReq
			t.Parse((*[HeaderSize]byte)(c.r.hdr[:HeaderSize]))
			err = &FatalError{FES: t.FES, FEI: t.FEI, Remote: true}
		default:
			err = fatal(FESInvalidField, 0, c.r.h.Type.String()+" sent to a controller")
		}
		if err != nil {
			return err
		}
		if c.held >= maxHeld {
			c.release()
		} else if c.src.rc != nil || c.buffered() {
			c.hold()
		}
	}
}

// keepAliveDeadline sets the admin queue's read deadline from the
// controller's KATO before each PDU, or clears the one set (set reports
// whether there is one) when KATO is 0: a host that turned keep alive
// off with Set Features is not timed out by the KATO it had. It reports
// whether a deadline is now set.
func (c *conn) keepAliveDeadline(set bool) bool {
	kato := c.q.KeepAlive()
	switch {
	case kato > 0:
		c.nc.SetReadDeadline(time.Now().Add(2*time.Duration(kato)*time.Millisecond + keepAliveGrace))
		return true
	case set:
		c.nc.SetReadDeadline(time.Time{})
	}
	return false
}

// buffered reports whether the next PDU is buffered whole, so that
// reading it cannot block.
func (c *conn) buffered() bool {
	br := c.r.br
	if c.r.data > 0 || c.r.dgst || br.Buffered() < CommonSize {
		return false
	}
	h, _ := br.Peek(CommonSize)
	return br.Buffered() >= int(binary.LittleEndian.Uint32(h[4:]))
}

// fail sends a C2HTermReq for a fatal error of this side, with the header
// of the PDU at fault: as much of it as was read (the common header alone
// when that was at fault), never bytes of an earlier PDU.
func (c *conn) fail(err error) {
	var fe *FatalError
	if !errors.As(err, &fe) || fe.Remote {
		return
	}
	hl := min(int(c.r.h.HLen), MaxTermData, c.r.got)
	if hl < CommonSize {
		hl = CommonSize
	}
	copy(c.term[HeaderSize:], c.r.hdr[:hl])
	t := TermReq{Header: Header{Type: TypeC2HTermReq, PLen: uint32(HeaderSize + hl), PDO: HeaderSize}, FES: fe.FES, FEI: fe.FEI}
	t.Put((*[HeaderSize]byte)(c.term[:HeaderSize]))
	c.termLen = HeaderSize + hl
	c.send(kindTerm)
}

// linger, after a TermReq, ends the connection gracefully: FIN first,
// then what the host still sends is read and dropped for a moment, so
// that closing with unread data (which sends a reset) does not destroy the
// TermReq before the host reads it.
func (c *conn) linger() {
	if c.termLen == 0 {
		return
	}
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	c.nc.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
}

func (c *conn) takeSlot() (uint16, error) {
	if i, ok := c.popSlot(); ok {
		return i, nil
	}
	if err := c.release(); err != nil { // frees the slots of what it writes
		return 0, err
	}
	if i, ok := c.popSlot(); ok {
		return i, nil
	}
	t := time.NewTimer(c.s.slotWait())
	defer t.Stop()
	for {
		select {
		case <-c.freeSig:
			if i, ok := c.popSlot(); ok {
				return i, nil
			}
		case <-t.C:
			return 0, fatal(FESSequence, 0, "more commands in flight than the queue's entries")
		case <-c.s.ctx.Done():
			return 0, net.ErrClosed
		}
	}
}

func (c *conn) inCapsuleLimit() int {
	if c.q.ID() == 0 || !c.q.Connected() {
		return adminInCapsule
	}
	return c.s.Fabric.InCapsuleSize
}

// command takes a CapsuleCmd: it runs the command, or asks for its data.
func (c *conn) command() error {
	var p CapsuleCmd
	if err := p.Parse((*[CmdSize]byte)(c.r.hdr[:CmdSize])); err != nil {
		return err
	}
	i, err := c.takeSlot()
	if err != nil {
		return err
	}
	c.held++
	sl := &c.slots[i]
	sl.cmd, sl.state, sl.bad, sl.n, sl.paged = p.Cmd, slotBusy, false, 0, false
	c.sqhd.Store(c.sqHead(c.sqhd.Load() + 1))
	sgl, inCap, dir := sl.cmd.SGL, c.r.data, sl.cmd.Direction()
	switch {
	case inCap > 0:
		return c.inCapsule(i, inCap)
	case sgl.Length == 0 || dir == nvme.DirNone:
		return c.run(i, nil)
	case sgl.Type != nvme.SGLTransportDataBlock:
		return c.finish(i, nvme.StatusSGLTypeInvalid|nvme.StatusDNR)
	case int64(sgl.Length) > int64(c.maxTransfer):
		return c.finish(i, nvme.StatusInvalidField|nvme.StatusDNR)
	case dir == nvme.DirHostToCtrl:
		if !c.takesPages(sl, int(sgl.Length)) {
			sl.data(int(sgl.Length))
		}
		sl.got, sl.state = 0, slotData
		return c.send(kindR2T | uint32(i))
	case dir == nvme.DirCtrlToHost:
		if c.lendRead(i, int(sgl.Length)) {
			return c.complete(i)
		}
		return c.run(i, sl.data(int(sgl.Length)))
	}
	return c.finish(i, nvme.StatusInvalidField|nvme.StatusDNR)
}

// inCapsule takes the inCap bytes of data in slot i's CapsuleCmd and runs
// its command.
func (c *conn) inCapsule(i uint16, inCap int) error {
	sl := &c.slots[i]
	switch sgl := sl.cmd.SGL; {
	case sgl.Type != nvme.SGLDataBlockOffset:
		return c.finish(i, nvme.StatusSGLTypeInvalid|nvme.StatusDNR)
	case sgl.Addr != 0 || inCap > c.inCapsuleLimit():
		return c.finish(i, nvme.StatusSGLOffsetInvalid|nvme.StatusDNR)
	case int(sgl.Length) != inCap:
		return c.finish(i, nvme.StatusSGLLengthInvalid|nvme.StatusDNR)
	case sl.cmd.Direction() != nvme.DirHostToCtrl:
		return c.finish(i, nvme.StatusInvalidField|nvme.StatusDNR)
	}
	var buf []byte // nil when the data is read into pages
	var err error
	if c.takesPages(sl, inCap) {
		err = c.readPages(sl, 0, inCap)
	} else {
		buf = sl.data(inCap)
		err = c.readPayload(buf)
	}
	if err != nil {
		return err
	}
	if err := c.r.endData(); err == ErrDataDigest {
		return c.finish(i, nvme.StatusDataTransferError)
	} else if err != nil {
		return err
	}
	return c.run(i, buf)
}

// h2cData takes an H2CData PDU for a slot waiting for data.
func (c *conn) h2cData() error {
	var d Data
	if err := d.Parse((*[HeaderSize]byte)(c.r.hdr[:HeaderSize])); err != nil {
		return err
	}
	if int(d.TTag) >= len(c.slots) || c.slots[d.TTag].state != slotData {
		return fatal(FESInvalidField, 10, "H2CData for no R2T")
	}
	sl := &c.slots[d.TTag]
	switch {
	case sl.cmd.CID != d.CCCID:
		return fatal(FESInvalidField, 8, "H2CData CCCID does not match its TTAG")
	case int(d.DataO) != sl.got:
		return fatal(FESDataOutOfRange, 12, "H2CData DATAO out of order")
	case int(d.DataL) != c.r.data:
		return fatal(FESInvalidField, 16, "H2CData DATAL does not match PLEN")
	case int64(d.DataL) > int64(sl.n-sl.got):
		return fatal(FESDataOutOfRange, 16, "H2CData past the command's data")
	}
	var err error
	if sl.paged {
		err = c.readPages(sl, sl.got, int(d.DataL))
	} else {
		err = c.readPayload(sl.buf[sl.got : sl.got+int(d.DataL)])
	}
	if err != nil {
		return err
	}
	if err := c.r.endData(); err == ErrDataDigest {
		sl.bad = true
	} else if err != nil {
		return err
	}
	sl.got += int(d.DataL)
	if sl.got < sl.n {
		return nil
	}
	sl.state = slotBusy
	if sl.bad {
		return c.finish(d.TTag, nvme.StatusDataTransferError)
	}
	if sl.paged {
		return c.run(d.TTag, nil)
	}
	return c.run(d.TTag, sl.buf[:sl.n])
}

// exec runs the slot's command and sends its completion.
func (c *conn) exec(i uint16, data []byte) error {
	sl := &c.slots[i]
	if sl.paged {
		if c.writePages(sl) {
			return c.complete(i)
		}
		data = sl.gather()
	} else if c.writePage(sl, data) {
		return c.complete(i)
	}
	ctx := c.s.ctx
	if c.work != nil { // an I/O command: see noCancel
		ctx = noCancel
	}
	start := time.Now()
	cpl, held := c.q.Exec(ctx, &sl.cmd, data)
	c.timeExec(start)
	if held {
		sl.state = slotHeld
		c.ev.hold(i)
		return nil
	}
	sl.cpl = cpl
	return c.complete(i)
}

// finish completes the slot's command with st without running it.
func (c *conn) finish(i uint16, st nvme.Status) error {
	sl := &c.slots[i]
	sl.cpl = nvme.Completion{CID: sl.cmd.CID, SQID: c.q.ID(), Status: st}
	return c.complete(i)
}

func (c *conn) complete(i uint16) error {
	c.setSQHead(&c.slots[i])
	return c.send(kindResp | uint32(i))
}

// setSQHead puts the SQ head pointer in the slot's completion.
func (c *conn) setSQHead(sl *slot) {
	sl.cpl.SQHead = uint16(c.sqHead(c.sqhd.Load()))
	if c.q.SQFlowDisabled() {
		sl.cpl.SQHead = 0xFFFF
	}
}

// sqHead returns the SQ head pointer h (the entries taken so far) wraps
// to: h modulo the queue's entries (SQSIZE + 1), once Connect set them.
// The head is the entry after the last one taken, so Connect's own
// completion says 1 (0 would claim that nothing was taken) and the next
// command's 2, as Linux's target answers.
func (c *conn) sqHead(h uint32) uint32 {
	if n := uint32(c.q.Size()); n > 0 {
		return h % n
	}
	return h
}
