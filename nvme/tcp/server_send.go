package tcp

import (
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/zerocopy"
)

// The writing side of a connection: PDUs queued by whoever finished a
// command and written, batch by batch, by whoever holds the pen. There is
// no writer goroutine: the goroutine that queues an item while no one
// writes becomes the writer and writes every item queued meanwhile in
// one writev ("flat combining", as nbd's server does). The reader holds
// the pen while the host is still sending (on a socket from the moment
// it reads a PDU, elsewhere while the next PDU is buffered whole), so the
// completions of a burst of commands leave together, the first one
// included, and puts it down before anything that may block: a read
// from the network, a wait for a free slot.

// maxHeld bounds the completions the reader holds back while the host is
// still sending. It is nbd's server's bound (serverMaxHeld): with the pen
// held from the first command of a burst, a bound as large as the host's
// depth would answer a burst only once all of it has run, and the host
// would send nothing meanwhile (64 KiB writes at depth 8 in
// examples/nvmebench); half of it keeps both sides busy.
const maxHeld = 4

// send queues item for the wire and writes the queue unless someone holds
// the pen. It returns the first write error of the connection.
func (c *conn) send(item uint32) error {
	c.wmu.Lock()
	c.queue = append(c.queue, item)
	if c.writing {
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	return c.writeQueued()
}

// hold makes the reader the holder of the pen if no one writes: items
// queue until release.
func (c *conn) hold() {
	if c.holding {
		return
	}
	c.wmu.Lock()
	if !c.writing {
		c.writing, c.holding = true, true
	}
	c.wmu.Unlock()
}

// release writes what queued while the reader held the pen and puts it
// down.
func (c *conn) release() error {
	c.held = 0
	if !c.holding {
		return nil
	}
	c.holding = false
	c.wmu.Lock()
	return c.writeQueued()
}

// writeQueued writes the queue, batch by batch, until it is empty, and
// puts the pen down. It is called with wmu held and the pen taken, and
// returns with wmu released. After a write fails the connection is
// closed (which stops the reader) and later items are dropped, their
// slots freed all the same.
func (c *conn) writeQueued() error {
	for len(c.queue) > 0 {
		batch := c.queue
		c.queue, c.spare = c.spare[:0], batch
		failed := c.werr != nil
		c.wmu.Unlock()
		var err error
		for _, item := range batch {
			if c.need(item) > c.snd.room() || c.nfree == len(c.freed) {
				if e := c.flush(failed || err != nil); err == nil {
					err = e
				}
			}
			c.stage(item)
		}
		if e := c.flush(failed || err != nil); err == nil {
			err = e
		}
		c.wmu.Lock()
		if err != nil && c.werr == nil {
			c.werr = err
			c.nc.Close()
		}
	}
	c.writing = false
	err := c.werr
	c.wmu.Unlock()
	return err
}

// writeErr returns the first write error of the connection.
func (c *conn) writeErr() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.werr
}

// flush writes the staged PDUs (or drops them, after a failure) and frees
// the slots of the completions among them, ending their loans.
func (c *conn) flush(drop bool) error {
	var err error
	if drop {
		c.snd.reset()
	} else {
		err = c.snd.flush()
	}
	for _, i := range c.freed[:c.nfree] {
		sl := &c.slots[i]
		if sl.loan.Lent() {
			clear(sl.pieces) // keep no piece alive
			sl.pieces = sl.pieces[:0]
			sl.loan.GiveBack()
		}
		c.freeSlot(i)
	}
	c.nfree = 0
	return err
}

// need returns how many pieces stage adds for item, at most.
func (c *conn) need(item uint32) int {
	if item&^0xFFFF != kindResp {
		return 1
	}
	return 3 + max(1, len(c.slots[uint16(item)].pieces)) // header, data, digest, CapsuleResp
}

// stage queues the PDUs of one item: an R2T, a completion (with its
// C2HData first for a read), or the TermReq.
func (c *conn) stage(item uint32) {
	if item == kindTerm {
		c.snd.add(c.term[:c.termLen])
		return
	}
	i := uint16(item)
	sl := &c.slots[i]
	if item&^0xFFFF == kindR2T {
		r := R2T{Header: c.f.layout(TypeR2T, 0), CCCID: sl.cmd.CID, TTag: i, R2TL: uint32(sl.n)}
		r.Put((*[HeaderSize]byte)(sl.hdr[:HeaderSize]))
		c.snd.add(c.f.sealHeader(sl.hdr[:], HeaderSize))
		return
	}
	resp := sl.resp[:]
	p := CapsuleResp{Header: c.f.layout(TypeCapsuleResp, 0), Cpl: sl.cpl}
	p.Put((*[HeaderSize]byte)(resp[:HeaderSize]))
	resp = c.f.sealHeader(resp, HeaderSize)
	if sl.cmd.Direction() == nvme.DirCtrlToHost && sl.n > 0 && sl.cpl.Status.Success() {
		c.stageData(sl, resp)
	} else {
		c.snd.add(resp)
	}
	c.freed[c.nfree] = i
	c.nfree++
}

// stageData queues a read's C2HData (header, data, digest) and then resp,
// its CapsuleResp, unless SQ flow control is off (the C2HData's SUCCESS
// flag then stands for it). The data is the slot's buffer or, for a read
// lent by the backend, the pieces lent (holes as zeroes).
func (c *conn) stageData(sl *slot, resp []byte) {
	d := Data{Header: c.f.layout(TypeC2HData, sl.n), CCCID: sl.cmd.CID, DataL: uint32(sl.n)}
	d.Flags |= FlagLast
	if c.q.SQFlowDisabled() {
		d.Flags |= FlagSuccess
		resp = nil
	}
	d.Put((*[HeaderSize]byte)(sl.hdr[:HeaderSize]))
	c.snd.add(c.f.sealHeader(sl.hdr[:], HeaderSize))
	var crc uint32
	if !sl.loan.Lent() {
		data := sl.buf[:sl.n]
		c.snd.add(data)
		if c.f.ddgst {
			crc = crc32.Update(0, castagnoli, data)
		}
	} else {
		for _, p := range sl.pieces {
			b := p.Data
			if b == nil {
				b = holeZeroes[:p.Len]
			}
			c.snd.add(b)
			if c.f.ddgst {
				crc = crc32.Update(crc, castagnoli, b)
			}
		}
	}
	if c.f.ddgst {
		sl.ddgst[0], sl.ddgst[1], sl.ddgst[2], sl.ddgst[3] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
		c.snd.add(sl.ddgst[:])
	}
	c.snd.add(resp)
}

// holeZeroes stands for the holes of a lent read: a Lender's pieces are
// at most a page long (lendRead checks).
var holeZeroes [nbd.PageSize]byte

// wire gathers the PDU pieces the pen's holder stages and writes them in
// one writev (zerocopy.Batch: on Linux a raw writev on the non-blocking
// socket, as nbd's server writes its replies). A piece must stay
// unchanged until flush or reset returns.
type wire struct {
	msg   zerocopy.Message
	batch *zerocopy.Batch
	n     int // pieces added
	bytes int // their bytes

	// Server.ReplyTimeout, once the connection is connected (0: none),
	// the write deadline set, and the scratch of flushWindows.
	nc       net.Conn
	timeout  time.Duration
	deadline time.Time
	views    [][]byte
}

// replyWindow is the most of a batch written under one deadline of
// Server.ReplyTimeout: a host that takes that much per ReplyTimeout
// keeps its connection however large the batch (nbd's serverReplyWindow).
const replyWindow = 1 << 20

// room returns how many more pieces fit before a flush.
func (w *wire) room() int { return maxIOV - w.n }

// add queues pieces (empty ones are skipped); the caller checks room.
func (w *wire) add(pieces ...[]byte) {
	for _, p := range pieces {
		if len(p) > 0 {
			w.msg.AppendBytes(p)
			w.n++
			w.bytes += len(p)
		}
	}
}

// flush writes what was added: in one writev, or, past replyWindow
// bytes with a ReplyTimeout, in one writev a window.
func (w *wire) flush() error {
	if w.n == 0 {
		return nil
	}
	defer w.reset()
	if w.timeout == 0 || w.bytes <= replyWindow {
		w.batch.Add(&w.msg)
		return w.write()
	}
	return w.flushWindows()
}

// flushWindows writes what was added replyWindow bytes at a time, each
// window under a deadline of its own.
func (w *wire) flushWindows() error {
	all := w.msg.Buffers(w.views[:0])
	w.views = all[:0]
	defer clear(all) // keep no piece alive
	for views := all; len(views) > 0; {
		views = w.batch.AddPrefix(views, replyWindow)
		if err := w.write(); err != nil {
			return err
		}
	}
	return nil
}

// write writes what w.batch holds, within ReplyTimeout if set: a write
// that times out fails with ErrReplyTimeout (the connection is then
// unusable, and closed by writeQueued). The deadline is renewed only once
// less than ReplyTimeout of it is left, to a quarter more than
// ReplyTimeout away: setting it costs several times reading the clock,
// and a write gets between ReplyTimeout and a quarter more. Only the
// write deadline is set: the admin queue's reader has one of its own
// (keepAliveDeadline).
func (w *wire) write() error {
	if w.timeout > 0 {
		if now := time.Now(); w.deadline.Sub(now) < w.timeout {
			w.deadline = now.Add(w.timeout + w.timeout/4)
			w.nc.SetWriteDeadline(w.deadline)
		}
	}
	_, err := w.batch.Write()
	if err != nil && w.timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: a write not taken within %v", ErrReplyTimeout, w.timeout)
	}
	return err
}

// reset drops what was added.
func (w *wire) reset() {
	w.msg.Release()
	w.n, w.bytes = 0, 0
}

func putDigest(d *[DigestSize]byte, data []byte) {
	v := Digest(data)
	d[0], d[1], d[2], d[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
