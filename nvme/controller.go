package nvme

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errorLogEntries is how many Error Information log entries a controller
// keeps (ELPE + 1).
const errorLogEntries = 16

// aerLimit is how many Asynchronous Event Requests a controller holds
// (AERL + 1).
const aerLimit = 4

// Controller is one controller of a Fabric, made by an admin queue's
// Connect and ended when that queue closes. Its methods are safe for
// concurrent use.
type Controller struct {
	f       *Fabric
	sub     *subsystem // nil: the discovery controller
	id      uint16
	hostNQN string
	hostID  [16]byte
	local   net.Addr // the admin queue's Queue.Local
	ready   atomic.Bool
	kato    atomic.Uint32
	lastKA  atomic.Int64 // unix ns of the last Keep Alive

	mu       sync.Mutex
	cc       CC
	csts     CSTS
	nq       int      // I/O queues granted by Number of Queues (0: not set)
	queues   []*Queue // connected queues by id, 0 the admin queue
	dead     bool     // the association ended
	ka       *time.Timer
	aec      uint32
	aers     []uint16 // CIDs of the held Asynchronous Event Requests
	ev       events
	sending  sync.WaitGroup // Transport.Complete calls decided under mu, not yet returned
	discGen  uint64         // the discovery log's GENCTR (discoveryLog)
	discLast []byte         // the discovery log entries GENCTR counts
	errCount uint64
	errLog   [errorLogEntries]ErrorLogEntry
	scratch  [IdentifySize]byte
}

// ID returns the controller id (CNTLID).
func (c *Controller) ID() uint16 { return c.id }

// HostNQN returns the NQN of the host that connected.
func (c *Controller) HostNQN() string { return c.hostNQN }

// SubNQN returns the NQN of the controller's subsystem.
func (c *Controller) SubNQN() string {
	if c.sub == nil {
		return DiscoveryNQN
	}
	return c.sub.NQN
}

// LastKeepAlive returns when the controller last got a Keep Alive (or
// was connected).
func (c *Controller) LastKeepAlive() time.Time { return time.Unix(0, c.lastKA.Load()) }

// fabrics runs a Fabrics command on q.
func (q *Queue) fabrics(cmd *Command, data []byte) (uint64, Status) {
	switch cmd.FabricsType() {
	case FabricsConnect:
		if q.ctrl != nil {
			return 0, StatusCommandSequence | StatusDNR
		}
		return q.connect(cmd, data)
	case FabricsPropertyGet, FabricsPropertySet:
		if q.ctrl == nil || q.id != 0 {
			return 0, StatusCommandSequence | StatusDNR
		}
		return q.ctrl.property(PropertyOf(cmd))
	}
	return 0, StatusInvalidOpcode | StatusDNR
}

func invalidParam(inData bool, off uint16) (uint64, Status) {
	r := uint64(off)
	if inData {
		r |= 1 << 16
	}
	return r, StatusConnectInvalidParam | StatusDNR
}

func (q *Queue) connect(cmd *Command, data []byte) (uint64, Status) {
	if len(data) < ConnectDataSize {
		return 0, StatusSGLLengthInvalid | StatusDNR
	}
	k := ConnectOf(cmd)
	var d ConnectData
	d.Parse((*[ConnectDataSize]byte)(data))
	if k.RecFmt != 0 {
		return 0, StatusConnectIncompatible | StatusDNR
	}
	var sub *subsystem
	if d.SubNQN != DiscoveryNQN {
		if sub = q.f.subs[d.SubNQN]; sub == nil {
			return invalidParam(true, ConnectOffsetSubNQN)
		}
	}
	if k.SQSize == 0 || int(k.SQSize) >= q.f.QueueDepth {
		return invalidParam(false, ConnectOffsetSQSize)
	}
	if k.QID == 0 {
		return q.connectAdmin(k, &d, sub)
	}
	q.f.mu.Lock()
	c := q.f.ctrls[d.ControllerID]
	q.f.mu.Unlock()
	if c == nil || c.sub != sub || sub == nil || c.hostNQN != d.HostNQN {
		return invalidParam(true, ConnectOffsetCNTLID)
	}
	if !c.ready.Load() {
		return 0, StatusCommandSequence | StatusDNR
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return invalidParam(true, ConnectOffsetCNTLID)
	}
	if int(k.QID) > c.nq || c.queues[k.QID] != nil {
		return invalidParam(false, ConnectOffsetQID)
	}
	c.queues[k.QID] = q
	q.ctrl, q.id, q.size, q.noSQF = c, k.QID, int(k.SQSize)+1, k.CATTR&CATTRNoSQFlow != 0
	return 0, StatusSuccess
}

func (q *Queue) connectAdmin(k Connect, d *ConnectData, sub *subsystem) (uint64, Status) {
	if d.ControllerID != DynamicControllerID {
		return invalidParam(true, ConnectOffsetCNTLID)
	}
	c := &Controller{f: q.f, sub: sub, hostNQN: d.HostNQN, hostID: d.HostID, local: q.Local, queues: make([]*Queue, q.f.MaxIOQueues+1)}
	c.queues[0] = q
	kato := k.KATO
	if kato == 0 && sub == nil {
		kato = DiscoveryKATO
	}
	c.kato.Store(kato)
	f := q.f
	f.mu.Lock()
	for range 0xFFEF {
		f.next = f.next%0xFFEF + 1 // ids 1..0xFFEF
		if f.ctrls[f.next] == nil {
			c.id = f.next
			break
		}
	}
	if c.id != 0 {
		f.ctrls[c.id] = c
	}
	f.mu.Unlock()
	if c.id == 0 {
		return 0, StatusConnectBusy
	}
	q.ctrl, q.id, q.size, q.noSQF = c, 0, int(k.SQSize)+1, k.CATTR&CATTRNoSQFlow != 0
	c.mu.Lock()
	c.armKeepAlive()
	c.mu.Unlock()
	return uint64(c.id), StatusSuccess
}

// CAP returns the controller capabilities the fabric advertises.
func (f *Fabric) CAP() CAP { return MakeCAP(uint16(f.QueueDepth-1), 15) }

func (c *Controller) property(p Property) (uint64, Status) {
	if p.Set {
		if p.Offset != PropCC || p.Size8 {
			return 0, StatusInvalidField | StatusDNR
		}
		c.mu.Lock()
		aborted := c.setCC(CC(p.Value))
		c.mu.Unlock()
		aborted.send()
		return 0, StatusSuccess
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case p.Offset == PropCAP && p.Size8:
		return uint64(c.f.CAP()), StatusSuccess
	case p.Offset == PropVS && !p.Size8:
		return Version1_3, StatusSuccess
	case p.Offset == PropCC && !p.Size8:
		return uint64(c.cc), StatusSuccess
	case p.Offset == PropCSTS && !p.Size8:
		return uint64(c.csts), StatusSuccess
	}
	return 0, StatusInvalidField | StatusDNR
}

// setCC applies a write of CC (NVMe Base 2.0, 3.5): EN 0 to 1 makes the
// controller ready if the configuration is one it supports (else fatal),
// EN 1 to 0 resets it, a shutdown notification completes at once. It
// returns the completions of the held requests a reset aborts, for the
// caller to send once c.mu is released. c.mu is held.
func (c *Controller) setCC(v CC) (aborted outbox) {
	old := c.cc
	c.cc = v
	switch {
	case v.Enable() && !old.Enable():
		if v.IOSQES() != 6 || v.IOCQES() != 4 || v.MPS() != 0 || v.AMS() != 0 || v.CSS() != 0 {
			c.csts |= CSTSFatal
			return aborted
		}
		c.csts = CSTSReady
		c.ready.Store(true)
	case !v.Enable() && old.Enable():
		c.csts &^= CSTSReady | CSTSShutdownMask | CSTSFatal
		c.ready.Store(false)
		c.nq = 0
		aborted = c.abortEvents()
	}
	if v.SHN() != 0 && old.SHN() == 0 {
		c.csts = c.csts&^CSTSShutdownMask | CSTSShutdownComplete
	}
	return aborted
}

// logError records a failed command in the Error Information log.
func (c *Controller) logError(qid uint16, cmd *Command, st Status) {
	c.mu.Lock()
	c.errCount++
	e := &c.errLog[c.errCount%errorLogEntries]
	*e = ErrorLogEntry{Count: c.errCount, SQID: qid, CID: cmd.CID, Status: st, Location: 0xFFFF, NSID: cmd.NSID, TrType: TransportTCP}
	if cmd.Opcode == OpRead || cmd.Opcode == OpWrite || cmd.Opcode == OpWriteZeroes {
		e.LBA = cmd.LBA()
	}
	c.mu.Unlock()
}
