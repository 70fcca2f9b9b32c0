package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/zerocopy"
)

// hslot is one command slot of a host queue; its index is the CID.
type hslot struct {
	cmd     nvme.Command
	cpl     nvme.Completion
	rbuf    []byte // where C2HData goes
	wbuf    []byte // what H2CData sends
	got     int    // C2HData bytes received
	sent    int    // H2CData bytes sent
	err     error
	busy    bool
	inCap   int // bytes of wbuf sent in the capsule
	hdrLen  int // bytes of cmdHdr sent
	done    chan struct{}
	parked  atomic.Bool // its caller is blocked in wait
	cmdHdr  [CmdSize + DigestSize]byte
	ddgst   [DigestSize]byte
	dataHdr [maxR2TChunks][HeaderSize + DigestSize]byte
	dataDg  [maxR2TChunks][DigestSize]byte
}

// maxR2TChunks bounds the H2CData PDUs that answer one R2T: the host's
// largest transfer is at most this many times MAXH2CDATA, so each chunk
// has its own header while it waits to be written.
const maxR2TChunks = 8

// hostQueue is one queue of a Host on its own connection: callers post
// the PDUs of their commands and the first one to find no write under way
// writes every PDU posted meanwhile in one writev; one goroutine reads
// PDUs and completes the commands.
//
// When its connection drops, a queue with resend set keeps its commands
// in flight: it reports the loss through onLost, and the Host suspends
// it, reconnects and resumes it on a new connection (a new generation),
// sending every command still in flight again. The PDUs of a command are
// built once, when it starts, and stay unchanged while it is in flight.
type hostQueue struct {
	nc       net.Conn
	qid      uint16
	f        framing
	r        *pduReader
	maxH2C   int
	inCap    int
	wmu      sync.Mutex
	writing  bool
	pend     [2][][]byte // pieces posted, double-buffered
	cur      int
	out      net.Buffers
	wb       *zerocopy.Batch // the writer's: raw writev on a socket
	wbConn   net.Conn        // the connection wb writes to
	splice   bool            // Config.SplicedWrites
	woken    atomic.Int32    // callers a completion woke that have not run yet
	wbatches int             // writevs written (under wmu; tests count them)
	mu       sync.Mutex
	err      error
	slots    []hslot
	free     chan uint16
	dead     chan struct{}
	rdone    chan struct{}
	gen      uint64      // connection generation; changed under wmu and mu
	down     bool        // suspended: starting commands wait for resume
	resend   bool        // a lost connection suspends rather than fails
	onLost   func(error) // told once when the connection is lost
	resent   int         // commands sent again by resume
}

// qconn is a queue's connection after ICReq/ICResp and Connect.
type qconn struct {
	nc     net.Conn
	f      framing
	r      *pduReader
	maxH2C int
}

// dialQueue connects one queue: TCP, ICReq/ICResp, Connect, its reader.
// It returns the queue and Connect's result.
func dialQueue(ctx context.Context, addr string, cfg *Config, k nvme.Connect, d *nvme.ConnectData) (*hostQueue, uint64, error) {
	c, res, err := handshake(ctx, addr, cfg, k, d)
	if err != nil {
		return nil, 0, err
	}
	q := &hostQueue{nc: c.nc, f: c.f, r: c.r, maxH2C: c.maxH2C, inCap: adminInCapsule, qid: k.QID, dead: make(chan struct{}), rdone: make(chan struct{}), splice: cfg.SplicedWrites}
	n := usableSlots(k)
	for i := range q.pend {
		q.pend[i] = make([][]byte, 0, 4*n+16)
	}
	q.slots = make([]hslot, n)
	q.free = make(chan uint16, n)
	for i := range q.slots {
		q.slots[i].done = make(chan struct{}, 1)
		q.free <- uint16(i)
	}
	go q.reader()
	return q, res, nil
}

// usableSlots returns how many commands the host may have in flight on
// a queue connected with k: its SQSIZE + 1 entries without SQ flow
// control, one fewer with it, since an SQ is full when its head is one
// past its tail (NVMe Base 2.0, 3.3.1.5), and a host that does not track
// the head (this one) may only count on the entries it has not filled.
func usableSlots(k nvme.Connect) int {
	if k.CATTR&nvme.CATTRNoSQFlow != 0 {
		return int(k.SQSize) + 1
	}
	return int(k.SQSize)
}

// handshake makes a queue's connection: TCP, ICReq/ICResp, then Connect
// and its response, before any other command. It returns Connect's
// result.
func handshake(ctx context.Context, addr string, cfg *Config, k nvme.Connect, d *nvme.ConnectData) (*qconn, uint64, error) {
	var dl net.Dialer
	nc, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	c := &qconn{nc: nc}
	var res uint64
	err = c.initConn(cfg)
	if err == nil {
		res, err = c.connect(k, d)
		if err != nil {
			err = fmt.Errorf("nvme/tcp: connect queue %d of %s: %w", k.QID, d.SubNQN, err)
		}
	}
	if err != nil {
		nc.Close()
		return nil, 0, err
	}
	nc.SetDeadline(timeZero)
	return c, res, nil
}

func (c *qconn) initConn(cfg *Config) error {
	var dg uint8
	if cfg.HeaderDigest {
		dg |= DigestHeader
	}
	if cfg.DataDigest {
		dg |= DigestData
	}
	var b [ICSize]byte
	(&ICReq{Digest: dg}).Put(&b)
	if _, err := c.nc.Write(b[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.nc, b[:]); err != nil {
		return noEOF(err)
	}
	var resp ICResp
	if err := resp.Parse(&b); err != nil {
		return err
	}
	switch {
	case resp.PFV != 0, resp.CPDA != 0:
		return fatal(FESUnsupportedParam, 8, "ICResp PFV or CPDA not 0")
	case resp.Digest != dg:
		return fatal(FESUnsupportedParam, 11, "ICResp digests differ from those asked")
	case resp.MaxH2CData < 4096 || resp.MaxH2CData%4 != 0:
		return fatal(FESUnsupportedParam, 12, "ICResp MAXH2CDATA too small")
	}
	c.f = framing{hdgst: cfg.HeaderDigest, ddgst: cfg.DataDigest}
	c.maxH2C = int(min(resp.MaxH2CData, 1<<30))
	c.r = newHostPDUReader(c.nc)
	c.r.framing = c.f
	return nil
}

// connect sends Connect with its data in the capsule (CID 0: nothing
// else is in flight yet) and reads its response.
func (c *qconn) connect(k nvme.Connect, d *nvme.ConnectData) (uint64, error) {
	var cmd nvme.Command
	k.Encode(&cmd)
	cmd.Flags = nvme.FlagSGL
	cmd.SGL = nvme.SGL{Length: nvme.ConnectDataSize, Type: nvme.SGLDataBlockOffset}
	var hdr [CmdSize + DigestSize]byte
	(&CapsuleCmd{Header: c.f.layout(TypeCapsuleCmd, nvme.ConnectDataSize), Cmd: cmd}).Put((*[CmdSize]byte)(hdr[:CmdSize]))
	var data [nvme.ConnectDataSize]byte
	d.Put(&data)
	out := net.Buffers{c.f.sealHeader(hdr[:], CmdSize), data[:]}
	var dg [DigestSize]byte
	if c.f.ddgst {
		putDigest(&dg, data[:])
		out = append(out, dg[:])
	}
	if _, err := out.WriteTo(c.nc); err != nil {
		return 0, err
	}
	if err := c.r.next(); err != nil {
		return 0, noEOF(err)
	}
	switch c.r.h.Type {
	case TypeCapsuleResp:
	case TypeC2HTermReq:
		var t TermReq
		t.Parse((*[HeaderSize]byte)(c.r.hdr[:HeaderSize]))
		return 0, &FatalError{FES: t.FES, FEI: t.FEI, Remote: true}
	default:
		return 0, fatal(FESSequence, 0, c.r.h.Type.String()+" in answer to Connect")
	}
	var p CapsuleResp
	p.Parse((*[HeaderSize]byte)(c.r.hdr[:HeaderSize]))
	return p.Cpl.Result, p.Cpl.Err()
}

// maxHostPDUData bounds the data of one PDU the host accepts.
const maxHostPDUData = 1 << 26

// do runs cmd and waits for its completion. rbuf receives the data of a
// command that returns data; wbuf is the data of one that sends it.
func (q *hostQueue) do(ctx context.Context, cmd *nvme.Command, rbuf, wbuf []byte) (nvme.Completion, error) {
	i, err := q.start(ctx, cmd, rbuf, wbuf)
	if err != nil {
		return nvme.Completion{}, err
	}
	return q.wait(i)
}

// start sends cmd (its CID becomes a free slot's index) and returns the
// slot to wait on. It blocks until a slot is free: a caller that has
// commands of its own in flight must use tryStart instead, since the
// slots it holds may be the ones it would wait for.
func (q *hostQueue) start(ctx context.Context, cmd *nvme.Command, rbuf, wbuf []byte) (uint16, error) {
	var i uint16
	select {
	case i = <-q.free:
	case <-q.dead:
		return 0, q.failure()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return q.launch(i, cmd, rbuf, wbuf)
}

// tryStart is start that does not wait: ok is false, and nothing is
// sent, when no slot is free.
func (q *hostQueue) tryStart(cmd *nvme.Command, rbuf, wbuf []byte) (i uint16, ok bool, err error) {
	select {
	case i = <-q.free:
	default:
		return 0, false, nil
	}
	i, err = q.launch(i, cmd, rbuf, wbuf)
	return i, err == nil, err
}

// launch sends cmd in slot i, just taken from q.free (which gets it back
// if the queue has failed).
func (q *hostQueue) launch(i uint16, cmd *nvme.Command, rbuf, wbuf []byte) (uint16, error) {
	sl := &q.slots[i]
	sl.cmd = *cmd
	sl.cmd.CID, sl.cmd.Flags = i, nvme.FlagSGL
	sl.rbuf, sl.wbuf, sl.got, sl.sent, sl.err = rbuf, wbuf, 0, 0, nil
	inCap := 0
	switch {
	case len(wbuf) > 0 && len(wbuf) <= q.inCap:
		inCap = len(wbuf)
		sl.cmd.SGL = nvme.SGL{Length: uint32(inCap), Type: nvme.SGLDataBlockOffset}
	case len(wbuf) > 0:
		sl.cmd.SGL = nvme.SGL{Length: uint32(len(wbuf)), Type: nvme.SGLTransportDataBlock}
	default:
		sl.cmd.SGL = nvme.SGL{Length: uint32(len(rbuf)), Type: nvme.SGLTransportDataBlock}
	}
	sl.sent, sl.inCap = inCap, inCap
	p := CapsuleCmd{Header: q.f.layout(TypeCapsuleCmd, inCap), Cmd: sl.cmd}
	p.Put((*[CmdSize]byte)(sl.cmdHdr[:CmdSize]))
	sl.hdrLen = len(q.f.sealHeader(sl.cmdHdr[:], CmdSize))
	if inCap > 0 && q.f.ddgst {
		putDigest(&sl.ddgst, wbuf)
	}
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		q.free <- i
		return 0, q.failure()
	}
	sl.busy = true
	gen, down := q.gen, q.down
	q.mu.Unlock()
	if down { // resume sends it
		return i, nil
	}
	if !q.enqueue(gen, q.capsule(sl)) {
		return i, nil // the writer under way writes it
	}
	if q.woken.Load() > 0 {
		// Callers that completions woke are about to run, most of them
		// to start their next command: let them queue theirs behind
		// this one first, so that one writev carries them all (as nbd's
		// client does).
		runtime.Gosched()
	}
	q.writeQueued(gen)
	return i, nil
}

// capsule returns the pieces of slot sl's command PDU: the header, the
// in-capsule data and its digest.
func (q *hostQueue) capsule(sl *hslot) [3][]byte {
	var dg []byte
	if sl.inCap > 0 && q.f.ddgst {
		dg = sl.ddgst[:]
	}
	return [3][]byte{sl.cmdHdr[:sl.hdrLen], sl.wbuf[:sl.inCap], dg}
}

// send posts the command PDU of slot sl, in flight, on connection gen.
func (q *hostQueue) send(sl *hslot, gen uint64) {
	q.post(gen, q.capsule(sl))
}

// wait waits for slot i's completion and frees the slot.
func (q *hostQueue) wait(i uint16) (nvme.Completion, error) {
	sl := &q.slots[i]
	select {
	case <-sl.done:
	default:
		sl.parked.Store(true)
		<-sl.done
		if !sl.parked.Swap(false) {
			q.woken.Add(-1) // complete counted this wake
		}
	}
	cpl, err := sl.cpl, sl.err
	sl.rbuf, sl.wbuf = nil, nil
	q.free <- i
	return cpl, err
}

// failure returns why the queue failed.
func (q *hostQueue) failure() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// fail ends the queue with err: every command in flight fails with it.
// It reports whether it did (false: the queue had failed already).
func (q *hostQueue) fail(err error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return false
	}
	q.err = err
	close(q.dead)
	q.nc.Close()
	for i := range q.slots {
		if sl := &q.slots[i]; sl.busy {
			sl.busy, sl.err = false, err
			sl.done <- struct{}{}
		}
	}
	return true
}

// lost handles the loss of connection gen: a queue that resends is
// suspended, its commands kept for the next connection; another fails.
// Either way onLost hears of it once.
func (q *hostQueue) lost(gen uint64, err error) {
	q.mu.Lock()
	resend, onLost := q.resend, q.onLost
	q.mu.Unlock()
	if !resend {
		if q.fail(err) && onLost != nil {
			onLost(err)
		}
		return
	}
	q.mu.Lock()
	if q.err != nil || q.down || gen != q.gen {
		q.mu.Unlock()
		return
	}
	q.down = true
	q.nc.Close()
	q.mu.Unlock()
	onLost(err)
}

// recoverBy makes a lost connection suspend q (if resend) and tell
// onLost.
func (q *hostQueue) recoverBy(onLost func(error), resend bool) {
	q.mu.Lock()
	q.onLost, q.resend = onLost, resend
	q.mu.Unlock()
}

func (q *hostQueue) close() {
	q.fail(ErrClosed)
	<-q.rdone
}

// reader reads PDUs until the connection fails.
func (q *hostQueue) reader() {
	defer close(q.rdone)
	q.mu.Lock()
	gen := q.gen
	q.mu.Unlock()
	for {
		err := q.r.next()
		if err == nil {
			err = q.dispatch(gen)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("nvme/tcp: queue %d: connection lost: %w", q.qid, err)
			}
			q.lost(gen, err)
			return
		}
	}
}

func (q *hostQueue) dispatch(gen uint64) error {
	switch q.r.h.Type {
	case TypeCapsuleResp:
		var p CapsuleResp
		p.Parse((*[HeaderSize]byte)(q.r.hdr[:HeaderSize]))
		sl, err := q.busySlot(p.Cpl.CID, 12)
		if err != nil {
			return err
		}
		sl.cpl = p.Cpl
		if p.Cpl.Status.Success() && sl.got != len(sl.rbuf) {
			return fatal(FESSequence, 0, "completion before all of the command's data")
		}
		q.complete(sl)
	case TypeC2HData:
		return q.c2hData()
	case TypeR2T:
		return q.r2t(gen)
	case TypeC2HTermReq:
		var t TermReq
		t.Parse((*[HeaderSize]byte)(q.r.hdr[:HeaderSize]))
		return &FatalError{FES: t.FES, FEI: t.FEI, Remote: true}
	default:
		return fatal(FESInvalidField, 0, q.r.h.Type.String()+" sent to a host")
	}
	return nil
}

// busySlot returns the slot of a command in flight, by CID.
func (q *hostQueue) busySlot(cid uint16, fei uint32) (*hslot, error) {
	if int(cid) < len(q.slots) {
		q.mu.Lock()
		busy := q.slots[cid].busy
		q.mu.Unlock()
		if busy {
			return &q.slots[cid], nil
		}
	}
	return nil, fatal(FESInvalidField, fei, fmt.Sprintf("CID %d is not in flight", cid))
}

func (q *hostQueue) complete(sl *hslot) {
	q.mu.Lock()
	sl.busy = false
	q.mu.Unlock()
	if sl.parked.Swap(false) {
		q.woken.Add(1) // until its caller runs: see start
	}
	sl.done <- struct{}{}
}

func (q *hostQueue) c2hData() error {
	var d Data
	d.Parse((*[HeaderSize]byte)(q.r.hdr[:HeaderSize]))
	sl, err := q.busySlot(d.CCCID, 8)
	if err != nil {
		return err
	}
	switch {
	case int(d.DataO) != sl.got:
		return fatal(FESDataOutOfRange, 12, "C2HData DATAO out of order")
	case int(d.DataL) != q.r.data:
		return fatal(FESInvalidField, 16, "C2HData DATAL does not match PLEN")
	case int64(d.DataL) > int64(len(sl.rbuf)-sl.got):
		return fatal(FESDataOutOfRange, 16, "C2HData past the command's buffer")
	case d.Flags.Has(FlagSuccess) && !d.Flags.Has(FlagLast):
		return fatal(FESInvalidField, 1, "C2HData SUCCESS without LAST_PDU")
	}
	if err := q.r.readPayload(sl.rbuf[sl.got : sl.got+int(d.DataL)]); err != nil {
		return err
	}
	if err := q.r.endData(); err == ErrDataDigest {
		sl.err = ErrDataDigest
	} else if err != nil {
		return err
	}
	sl.got += int(d.DataL)
	if d.Flags.Has(FlagSuccess) {
		if sl.got != len(sl.rbuf) {
			return fatal(FESSequence, 0, "C2HData SUCCESS before all of the data")
		}
		sl.cpl = nvme.Completion{CID: d.CCCID, SQID: q.qid}
		q.complete(sl)
	}
	return nil
}

// r2t answers an R2T with H2CData PDUs of at most MAXH2CDATA bytes.
func (q *hostQueue) r2t(gen uint64) error {
	var r R2T
	r.Parse((*[HeaderSize]byte)(q.r.hdr[:HeaderSize]))
	sl, err := q.busySlot(r.CCCID, 8)
	if err != nil {
		return err
	}
	if r.R2TL == 0 || int(r.R2TO) < sl.sent || int64(r.R2TO)+int64(r.R2TL) > int64(len(sl.wbuf)) {
		return fatal(FESDataOutOfRange, 12, "R2T outside the command's data")
	}
	if (int(r.R2TL)+q.maxH2C-1)/q.maxH2C > maxR2TChunks {
		return fatal(FESDataLimit, 16, "R2T for more data than the host sends at once")
	}
	for k, off, end := 0, int(r.R2TO), int(r.R2TO)+int(r.R2TL); off < end; k++ {
		n := min(end-off, q.maxH2C)
		d := Data{Header: q.f.layout(TypeH2CData, n), CCCID: r.CCCID, TTag: r.TTag, DataO: uint32(off), DataL: uint32(n)}
		if off+n == end {
			d.Flags |= FlagLast
		}
		d.Put((*[HeaderSize]byte)(sl.dataHdr[k][:HeaderSize]))
		data := sl.wbuf[off : off+n]
		var dg []byte
		if q.f.ddgst {
			putDigest(&sl.dataDg[k], data)
			dg = sl.dataDg[k][:]
		}
		q.post(gen, [3][]byte{q.f.sealHeader(sl.dataHdr[k][:], HeaderSize), data, dg})
		off += n
		sl.sent = off
	}
	return nil
}

// post queues the pieces of one PDU for connection gen and writes them,
// with everything else queued, unless someone is writing.
func (q *hostQueue) post(gen uint64, pieces [3][]byte) {
	if q.enqueue(gen, pieces) {
		q.writeQueued(gen)
	}
}

// enqueue queues the pieces of one PDU for connection gen (they are
// dropped if the queue has moved to another), which stay unchanged until
// written. It reports whether they were queued while no one was writing:
// the caller must then call writeQueued. Otherwise the writer under way
// writes them: it looks for more queued after each writev.
func (q *hostQueue) enqueue(gen uint64, pieces [3][]byte) bool {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if gen != q.gen {
		return false
	}
	for _, p := range pieces {
		if len(p) > 0 {
			q.pend[q.cur] = append(q.pend[q.cur], p)
		}
	}
	return !q.writing
}

// writeQueued writes everything queued for connection gen, in rounds of
// one writev, until nothing is left, unless someone else is writing (who
// then writes it) or nothing is queued. A write error loses the
// connection.
func (q *hostQueue) writeQueued(gen uint64) {
	q.wmu.Lock()
	if q.writing || gen != q.gen || len(q.pend[q.cur]) == 0 {
		q.wmu.Unlock()
		return
	}
	q.writing = true
	var err error
	for len(q.pend[q.cur]) > 0 && err == nil {
		i := q.cur
		q.cur ^= 1
		q.wmu.Unlock()
		err = q.writeOut(q.pend[i]) // q.nc changes only while no one writes
		clear(q.pend[i])
		q.pend[i] = q.pend[i][:0]
		q.wbatches++
		q.wmu.Lock()
	}
	if err != nil {
		clear(q.pend[q.cur])
		q.pend[q.cur] = q.pend[q.cur][:0]
	}
	q.writing = false
	q.wmu.Unlock()
	if err != nil {
		q.lost(gen, err)
	}
}

// writeOut writes bufs whole: on a socket in one raw writev through a
// zerocopy.Batch (no wake of the runtime's sysmon thread per write, as
// nbd's client and server), elsewhere with net.Buffers.
func (q *hostQueue) writeOut(bufs [][]byte) error {
	if _, ok := q.nc.(syscall.Conn); !ok {
		q.out = bufs
		_, err := q.out.WriteTo(q.nc)
		return err
	}
	if q.wbConn != q.nc {
		if q.wb != nil {
			q.wb.SetSplice(0) // the old connection's pipe
		}
		q.wb, q.wbConn = zerocopy.NewBatch(q.nc), q.nc
		if q.splice {
			q.wb.SetSplice(zerocopy.SpliceMin)
		}
	}
	for _, b := range bufs {
		q.wb.AddBytes(b)
	}
	_, err := q.wb.Write()
	return err
}
