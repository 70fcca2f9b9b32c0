package tcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nhdkit/nhd/nvme"
)

// Error recovery, as Linux's nvme-tcp host does it: when any queue's
// connection drops (or a PDU from the controller is malformed), the
// whole association goes: every connection is closed, and after
// Config.ReconnectDelay the host connects again to the same address and
// subsystem with the same host NQN and host ID (a new controller, its
// admin queue, then as many I/O queues). The I/O commands in flight are
// kept and sent again on the new connections, reads and writes alike,
// and their callers only wait; admin commands in flight fail. Attempts
// repeat every ReconnectDelay until Config.LossTimeout has passed since
// the loss; then every command waiting, and every later one, fails with
// an error matching ErrControllerLost.

// Defaults of Config's recovery fields: those of Linux's nvme-fabrics
// (reconnect_delay, ctrl_loss_tmo).
const (
	DefaultReconnectDelay = 10 * time.Second
	DefaultLossTimeout    = 600 * time.Second
)

// ErrControllerLost is returned for I/O on a Host that could not
// reconnect to its controller within Config.LossTimeout.
var ErrControllerLost = errors.New("nvme/tcp: controller lost")

// suspend closes q's connection and waits until nothing reads or writes
// it; its commands in flight stay, and those that start wait for resume.
func (q *hostQueue) suspend() {
	q.mu.Lock()
	if q.err == nil {
		q.down = true
	}
	q.nc.Close()
	q.mu.Unlock()
	<-q.rdone
	q.idle()
}

// idle waits until no caller is writing (a write on the closed connection
// fails at once) and drops what is posted.
func (q *hostQueue) idle() {
	for {
		q.wmu.Lock()
		if !q.writing {
			break
		}
		q.wmu.Unlock()
		time.Sleep(time.Millisecond)
	}
	for i := range q.pend {
		clear(q.pend[i])
		q.pend[i] = q.pend[i][:0]
	}
	q.wmu.Unlock()
}

// resume moves a suspended q onto connection c and sends its commands in
// flight again, from their start.
func (q *hostQueue) resume(c *qconn) error {
	for {
		q.wmu.Lock()
		if !q.writing { // a straggler from before suspend
			break
		}
		q.wmu.Unlock()
		time.Sleep(time.Millisecond)
	}
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		q.wmu.Unlock()
		c.nc.Close()
		return q.err
	}
	q.nc, q.r, q.maxH2C = c.nc, c.r, c.maxH2C
	q.gen++
	q.down = false
	q.rdone = make(chan struct{})
	var again []*hslot
	for i := range q.slots {
		if sl := &q.slots[i]; sl.busy {
			sl.got, sl.sent, sl.err = 0, sl.inCap, nil
			again = append(again, sl)
		}
	}
	q.resent += len(again)
	gen := q.gen
	q.mu.Unlock()
	q.wmu.Unlock()
	go q.reader()
	for _, sl := range again {
		q.send(sl, gen)
	}
	return nil
}

// connectionLost starts error recovery, once for all queues; a loss
// while recovery runs makes it start over once it has reconnected.
func (h *Host) connectionLost(err error) {
	h.recMu.Lock()
	defer h.recMu.Unlock()
	switch {
	case h.closed || h.lost != nil:
	case h.recovering:
		h.again = true
	default:
		h.recovering = true
		h.recDone = make(chan struct{})
		go h.recover(err)
	}
}

// recover tears the association down and reconnects, again if a
// connection of the new one dropped meanwhile.
func (h *Host) recover(cause error) {
	defer close(h.recDone)
	for {
		lost := h.recoverOnce(cause)
		if lost != nil {
			for _, q := range h.io {
				q.fail(lost)
			}
		}
		h.recMu.Lock()
		if lost == nil && h.again && !h.closed {
			h.again = false
			h.recMu.Unlock()
			continue
		}
		h.recovering, h.again, h.lost = false, false, lost
		h.recMu.Unlock()
		return
	}
}

// recoverOnce suspends every queue and reconnects until it works, Close
// stops it (nil) or the loss timeout passes (the error to fail with, which
// names the loss, cause, and the last reconnection's error).
func (h *Host) recoverOnce(cause error) error {
	h.admin.Load().close()
	for _, q := range h.io {
		q.suspend()
	}
	h.recMu.Lock()
	h.again = false // losses so far were of the connections just closed
	h.recMu.Unlock()
	deadline := time.Now().Add(h.cfg.LossTimeout)
	for {
		t := time.NewTimer(min(h.cfg.ReconnectDelay, max(time.Until(deadline), 0)))
		select {
		case <-h.stopRec:
			t.Stop()
			return nil
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := h.reconnect(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: %w; no reconnection within %v, the last try: %w", ErrControllerLost, cause, h.cfg.LossTimeout, err)
		}
	}
}

// reconnect makes a new association: admin queue, enable, Identify,
// Number of Queues, then every I/O queue, resumed only once all are
// connected.
func (h *Host) reconnect(ctx context.Context) error {
	admin, cntlid, cc, err := connectAdmin(ctx, h.addr, h.subNQN, &h.cfg)
	if err != nil {
		return err
	}
	admin.recoverBy(h.connectionLost, false)
	var conns []*qconn
	defer func() {
		if err != nil {
			for _, c := range conns {
				c.nc.Close()
			}
			admin.close()
		}
	}()
	if err = h.checkController(ctx, admin, cntlid); err != nil {
		return err
	}
	d := nvme.ConnectData{HostID: h.cfg.HostID, ControllerID: cntlid, SubNQN: h.subNQN, HostNQN: h.cfg.HostNQN}
	for _, q := range h.io {
		var c *qconn
		c, _, err = handshakeIO(ctx, h.addr, &h.cfg, len(q.slots), nvme.Connect{QID: q.qid}, &d)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	h.recMu.Lock() // Close reads them once recovery ends
	h.cntlid, h.cc = cntlid, cc
	h.recMu.Unlock()
	h.admin.Store(admin)
	h.watchNamespace(admin)
	for i, q := range h.io {
		q.resume(conns[i]) // fails only if Close came: the connection is then closed
	}
	return nil
}

// checkController checks that the new controller serves the same
// namespace in the same format and grants as many I/O queues.
func (h *Host) checkController(ctx context.Context, admin *hostQueue, cntlid uint16) error {
	page := make([]byte, nvme.IdentifySize)
	if err := admin.identify(ctx, nvme.CNSController, 0, page); err != nil {
		return err
	}
	var id nvme.IdentifyController
	id.Parse((*[nvme.IdentifySize]byte)(page))
	if id.ControllerID != cntlid {
		return fmt.Errorf("nvme/tcp: controller id %d differs from Connect's %d", id.ControllerID, cntlid)
	}
	h.enableNotices(ctx, admin, &id)
	n := len(h.io)
	cmd := nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatNumberOfQueues, CDW11: nvme.NumberOfQueues(uint16(n), uint16(n))}
	cpl, err := admin.do(ctx, &cmd, nil, nil)
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		return fmt.Errorf("nvme/tcp: set number of queues: %w", err)
	}
	if sq, cq := nvme.QueuesOf(uint32(cpl.Result)); min(sq, cq) < n {
		return fmt.Errorf("nvme/tcp: the controller grants %d I/O queues, not %d", min(sq, cq), n)
	}
	if err := admin.identify(ctx, nvme.CNSNamespace, h.nsid, page); err != nil {
		return err
	}
	var ns nvme.IdentifyNamespace
	ns.Parse((*[nvme.IdentifySize]byte)(page))
	size := int64(ns.Size) << h.shift
	if ns.BlockSize() != 1<<h.shift || size < h.size.Load() {
		return fmt.Errorf("nvme/tcp: namespace %d changed its format or shrank", h.nsid)
	}
	h.resized(size) // it may have grown while the host was away
	return nil
}
