package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/nhdkit/nhd/nvme"
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
	done    chan struct{}
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
type hostQueue struct {
	nc      net.Conn
	qid     uint16
	f       framing
	r       *pduReader
	maxH2C  int
	inCap   int
	wmu     sync.Mutex
	writing bool
	pend    [2][][]byte // pieces posted, double-buffered
	cur     int
	out     net.Buffers
	mu      sync.Mutex
	err     error
	slots   []hslot
	free    chan uint16
	dead    chan struct{}
	rdone   chan struct{}
}

// dialQueue connects one queue: TCP, ICReq/ICResp, its reader, Connect.
// It returns the queue and Connect's result.
func dialQueue(ctx context.Context, addr string, cfg *Config, k nvme.Connect, d *nvme.ConnectData) (*hostQueue, uint64, error) {
	var dl net.Dialer
	nc, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	q := &hostQueue{nc: nc, qid: k.QID, dead: make(chan struct{}), rdone: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	if err := q.initConn(cfg); err != nil {
		nc.Close()
		return nil, 0, err
	}
	nc.SetDeadline(timeZero)
	n := int(k.SQSize) + 1
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
	var cmd nvme.Command
	k.Encode(&cmd)
	var data [nvme.ConnectDataSize]byte
	d.Put(&data)
	cpl, err := q.do(ctx, &cmd, nil, data[:])
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		q.close()
		return nil, 0, fmt.Errorf("nvme/tcp: connect queue %d of %s: %w", k.QID, d.SubNQN, err)
	}
	return q, cpl.Result, nil
}

func (q *hostQueue) initConn(cfg *Config) error {
	var dg uint8
	if cfg.HeaderDigest {
		dg |= DigestHeader
	}
	if cfg.DataDigest {
		dg |= DigestData
	}
	var b [ICSize]byte
	(&ICReq{Digest: dg}).Put(&b)
	if _, err := q.nc.Write(b[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(q.nc, b[:]); err != nil {
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
	q.f = framing{hdgst: cfg.HeaderDigest, ddgst: cfg.DataDigest}
	q.maxH2C = int(min(resp.MaxH2CData, 1<<30))
	q.inCap = adminInCapsule
	q.r = newHostPDUReader(q.nc)
	q.r.framing = q.f
	return nil
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
// slot to wait on.
func (q *hostQueue) start(ctx context.Context, cmd *nvme.Command, rbuf, wbuf []byte) (uint16, error) {
	var i uint16
	select {
	case i = <-q.free:
	case <-q.dead:
		return 0, q.failure()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
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
	sl.sent = inCap
	p := CapsuleCmd{Header: q.f.layout(TypeCapsuleCmd, inCap), Cmd: sl.cmd}
	p.Put((*[CmdSize]byte)(sl.cmdHdr[:CmdSize]))
	hdr := q.f.sealHeader(sl.cmdHdr[:], CmdSize)
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		q.free <- i
		return 0, q.failure()
	}
	sl.busy = true
	q.mu.Unlock()
	var dg []byte
	if inCap > 0 && q.f.ddgst {
		putDigest(&sl.ddgst, wbuf)
		dg = sl.ddgst[:]
	}
	q.post(hdr, wbuf[:inCap], dg)
	return i, nil
}

// wait waits for slot i's completion and frees the slot.
func (q *hostQueue) wait(i uint16) (nvme.Completion, error) {
	sl := &q.slots[i]
	<-sl.done
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
func (q *hostQueue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return
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
}

func (q *hostQueue) close() {
	q.fail(ErrClosed)
	<-q.rdone
}

// reader reads PDUs until the connection fails.
func (q *hostQueue) reader() {
	defer close(q.rdone)
	for {
		err := q.r.next()
		if err == nil {
			err = q.dispatch()
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = fmt.Errorf("nvme/tcp: queue %d: connection lost: %w", q.qid, err)
			}
			q.fail(err)
			return
		}
	}
}

func (q *hostQueue) dispatch() error {
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
		return q.r2t()
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
func (q *hostQueue) r2t() error {
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
		q.post(q.f.sealHeader(sl.dataHdr[k][:], HeaderSize), data, dg)
		off += n
		sl.sent = off
	}
	return nil
}

// post queues the pieces of one or more PDUs, which stay unchanged until
// written. The caller that finds no write under way writes everything
// posted, in rounds of one writev, until nothing is left; a write error
// fails the queue.
func (q *hostQueue) post(pieces ...[]byte) {
	q.wmu.Lock()
	for _, p := range pieces {
		if len(p) > 0 {
			q.pend[q.cur] = append(q.pend[q.cur], p)
		}
	}
	if q.writing {
		q.wmu.Unlock()
		return
	}
	q.writing = true
	var err error
	for len(q.pend[q.cur]) > 0 && err == nil {
		i := q.cur
		q.cur ^= 1
		q.wmu.Unlock()
		q.out = q.pend[i]
		_, err = q.out.WriteTo(q.nc)
		clear(q.pend[i])
		q.pend[i] = q.pend[i][:0]
		q.wmu.Lock()
	}
	if err != nil {
		clear(q.pend[q.cur])
		q.pend[q.cur] = q.pend[q.cur][:0]
	}
	q.writing = false
	q.wmu.Unlock()
	if err != nil {
		q.fail(err)
	}
}
