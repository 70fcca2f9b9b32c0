package nvme

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// admin runs an admin command other than a Fabrics one. Before the host
// enables the controller only Fabrics commands are allowed. The data of a
// command that returns data is zeroed first: what the command does not
// fill (a structure shorter than the transfer, a Get Features with none)
// reads as zeros, never as what the buffer held before (a transport's
// earlier command).
func (c *Controller) admin(ctx context.Context, cmd *Command, data []byte) (uint64, Status, bool) {
	if !c.ready.Load() {
		return 0, StatusCommandSequence | StatusDNR, false
	}
	if cmd.Direction() == DirCtrlToHost {
		clear(data)
	}
	switch cmd.Opcode {
	case OpIdentify:
		return 0, c.identify(cmd, data), false
	case OpGetLogPage:
		return 0, c.getLogPage(cmd, data), false
	case OpSetFeatures:
		r, st := c.setFeatures(cmd)
		return r, st, false
	case OpGetFeatures:
		r, st := c.getFeatures(cmd)
		return r, st, false
	case OpKeepAlive:
		if c.kato.Load() == 0 {
			// No timer to restart: Keep Alive Timeout Invalid, as
			// nvmet answers.
			return 0, StatusKeepAliveInvalid | StatusDNR, false
		}
		c.lastKA.Store(time.Now().UnixNano())
		return 0, StatusSuccess, false
	case OpAsyncEventRequest:
		return c.asyncEventRequest(cmd)
	}
	return 0, StatusInvalidOpcode | StatusDNR, false
}

// page returns where to build a 4096-byte structure for data: data itself
// when it is that long, else c.scratch (with c.mu held), copied out by
// done.
func (c *Controller) page(data []byte) (b *[IdentifySize]byte, done func()) {
	if len(data) >= IdentifySize {
		return (*[IdentifySize]byte)(data), func() {}
	}
	c.mu.Lock()
	return &c.scratch, func() { copy(data, c.scratch[:]); c.mu.Unlock() }
}

func (c *Controller) identify(cmd *Command, data []byte) Status {
	cns := uint8(cmd.CDW10)
	if c.sub == nil && cns != CNSController {
		return StatusInvalidField | StatusDNR
	}
	var ns *namespace
	var nss []*namespace
	if c.sub != nil {
		nss = c.sub.namespaces()
	}
	if cns == CNSNamespace || cns == CNSNamespaceDescriptors {
		if cmd.NSID == 0 || cmd.NSID > uint32(len(nss)) {
			return StatusInvalidNamespace | StatusDNR
		}
		ns = nss[cmd.NSID-1]
		if ns == nil && cns == CNSNamespaceDescriptors {
			return StatusInvalidNamespace | StatusDNR
		}
	}
	b, done := c.page(data)
	defer done()
	switch cns {
	case CNSController:
		c.identifyController().Put(b)
	case CNSNamespace:
		if ns == nil { // an inactive id: a zero filled structure
			clear(b[:])
			break
		}
		ns.identify().Put(b)
	case CNSActiveNamespaces:
		if cmd.NSID >= 0xFFFFFFFE {
			return StatusInvalidNamespace | StatusDNR
		}
		clear(b[:])
		for i, n := 0, 0; i < len(nss) && n < IdentifySize/4; i++ {
			if id := uint32(i + 1); id > cmd.NSID && nss[i] != nil {
				binary.LittleEndian.PutUint32(b[4*n:], id)
				n++
			}
		}
	case CNSNamespaceDescriptors:
		var csi [1]byte
		PutNamespaceDescriptors(b, []NamespaceDescriptor{{NIDTUUID, ns.uuid[:]}, {NIDTNGUID, ns.uuid[:]}, {NIDTCSI, csi[:]}})
	case CNSIOCommandSetCtrl:
		clear(b[:])
	default:
		return StatusInvalidField | StatusDNR
	}
	return StatusSuccess
}

func (c *Controller) identifyController() *IdentifyController {
	id := &IdentifyController{
		Serial: "nhd", Model: "nhd", Firmware: "nhd", MDTS: c.f.MDTS, ControllerID: c.id,
		Version: Version1_3, ControllerType: ControllerIO, AERL: aerLimit - 1,
		ELPE: errorLogEntries - 1, KAS: DefaultKAS, SQES: 0x66, CQES: 0x44,
		MaxCmd: uint16(min(c.f.QueueDepth, 0xFFFF)), SGLS: SGLSSupported | SGLSOffsetInCapsule,
		SubNQN: DiscoveryNQN, IOCCSZ: uint32(64+c.f.InCapsuleSize) / 16, IORCSZ: 1, MSDBD: 1,
	}
	if c.sub == nil {
		id.ControllerType = ControllerDiscovery
		return id
	}
	s := c.sub
	id.SubNQN, id.NN = s.NQN, uint32(len(s.namespaces()))
	id.ONCS = ONCSWriteZeroes | ONCSDatasetManagement
	id.OAES = OAESNamespaceAttr
	if s.flush.Load() {
		id.VWC = 1
	}
	id.Serial = s.Serial
	if id.Serial == "" {
		id.Serial = serialOf(s.NQN)
	}
	if s.Model != "" {
		id.Model = s.Model
	}
	if s.Firmware != "" {
		id.Firmware = s.Firmware
	}
	return id
}

// serialOf derives a 20-character serial number from an NQN.
func serialOf(nqn string) string {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(nqn); i++ {
		h = (h ^ uint64(nqn[i])) * 1099511628211
	}
	const hex = "0123456789abcdef"
	var s [16]byte
	for i := range s {
		s[i] = hex[h>>(60-4*i)&0xF]
	}
	return string(s[:])
}

func (ns *namespace) identify() *IdentifyNamespace {
	id := &IdentifyNamespace{Size: ns.blocks, Capacity: ns.blocks, Utilization: ns.blocks, NGUID: ns.uuid}
	id.LBAF[0] = LBAFormat{LBADS: uint8(ns.shift)}
	if ns.ReadOnly {
		id.Attributes = 1
	}
	if _, ok := ns.Backend.(nbd.Trimmer); ok {
		id.DLFEAT = 1 // deallocated blocks read as zeroes
	}
	return id
}

func (c *Controller) getLogPage(cmd *Command, data []byte) Status {
	g := LogPageOf(cmd)
	if g.Offset%4 != 0 {
		return StatusInvalidField | StatusDNR
	}
	if g.Length > uint64(len(data)) { // NUMD past the command's data
		return StatusSGLLengthInvalid | StatusDNR
	}
	var page []byte
	switch {
	case g.LID == LogDiscovery && c.sub == nil:
		page = c.discoveryLog()
	case g.LID == LogError:
		var b [errorLogEntries * ErrorLogEntrySize]byte
		c.mu.Lock()
		for i := range errorLogEntries { // newest first
			e := c.errLog[(c.errCount-uint64(i))%errorLogEntries]
			if e.Count != 0 && uint64(i) < c.errCount {
				e.Put((*[ErrorLogEntrySize]byte)(b[i*ErrorLogEntrySize:]))
			}
		}
		c.mu.Unlock()
		page = b[:]
	case g.LID == LogChangedNamespaces && c.sub != nil:
		var b [IdentifySize]byte
		c.changedLog(&b, !g.RAE)
		page = b[:]
	case g.LID == LogSMART && c.sub != nil:
		var b [SMARTLogSize]byte
		c.sub.smart().Put(&b)
		page = b[:]
	default:
		return StatusInvalidField | StatusDNR
	}
	if g.Offset > uint64(len(page)) {
		return StatusInvalidField | StatusDNR
	}
	n := copy(data[:g.Length], page[g.Offset:])
	clear(data[n:])
	return StatusSuccess
}

func (s *subsystem) smart() *SMARTLog {
	return &SMARTLog{
		Temperature: 273 + 30, AvailableSpare: 100, SpareThreshold: 10,
		DataUnitsRead: s.stats.unitsRead.Load(), DataUnitsWritten: s.stats.unitsWritten.Load(),
		HostReads: s.stats.reads.Load(), HostWrites: s.stats.writes.Load(),
	}
}

// discoveryLog builds the discovery log page from Fabric.Discovery. Its
// GENCTR goes up whenever the entries differ from those the controller
// built last (a listener opened or closed, say), so that a host reading
// the log in several commands sees that it changed between them.
func (c *Controller) discoveryLog() []byte {
	var es []DiscoveryLogEntry
	if c.f.Discovery != nil {
		es = c.f.Discovery(c.local)
	}
	page := make([]byte, DiscoveryLogPageSize*(1+len(es)))
	for i := range es {
		es[i].Put((*[DiscoveryLogPageSize]byte)(page[DiscoveryLogPageSize*(i+1):]))
	}
	c.mu.Lock()
	if c.discGen == 0 || !bytes.Equal(c.discLast, page[DiscoveryLogPageSize:]) {
		c.discGen++
		c.discLast = append(c.discLast[:0], page[DiscoveryLogPageSize:]...)
	}
	h := DiscoveryLogHeader{GenCtr: c.discGen, NumRec: uint64(len(es))}
	c.mu.Unlock()
	h.Put((*[DiscoveryLogPageSize]byte)(page))
	return page
}

func (c *Controller) setFeatures(cmd *Command) (uint64, Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(cmd.CDW10) {
	case FeatNumberOfQueues:
		sq, cq := QueuesOf(cmd.CDW11)
		if sq == 0x10000 || cq == 0x10000 {
			return 0, StatusInvalidField | StatusDNR
		}
		n := min(sq, cq, c.f.MaxIOQueues)
		if c.sub == nil {
			n = 1 // a discovery controller has no I/O queues, but says 1
		}
		c.nq = n
		return uint64(NumberOfQueues(uint16(n), uint16(n))), StatusSuccess
	case FeatAsyncEventConfig:
		c.aec = cmd.CDW11
	case FeatKeepAliveTimer:
		c.kato.Store(cmd.CDW11)
		c.armKeepAlive()
	case FeatArbitration, FeatPowerManagement, FeatTemperature, FeatErrorRecovery, FeatTimestamp, FeatWriteAtomicity:
	case FeatVolatileWriteCache:
		if c.sub == nil || !c.sub.flush.Load() {
			return 0, StatusInvalidField | StatusDNR
		}
	default:
		return 0, StatusInvalidField | StatusDNR
	}
	return 0, StatusSuccess
}

func (c *Controller) getFeatures(cmd *Command) (uint64, Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch uint8(cmd.CDW10) {
	case FeatNumberOfQueues:
		n := max(c.nq, 1)
		return uint64(NumberOfQueues(uint16(n), uint16(n))), StatusSuccess
	case FeatAsyncEventConfig:
		return uint64(c.aec), StatusSuccess
	case FeatKeepAliveTimer:
		return uint64(c.kato.Load()), StatusSuccess
	case FeatVolatileWriteCache:
		if c.sub != nil && c.sub.flush.Load() {
			return 1, StatusSuccess
		}
		return 0, StatusSuccess
	case FeatArbitration, FeatPowerManagement, FeatTemperature, FeatErrorRecovery, FeatWriteAtomicity:
		return 0, StatusSuccess
	}
	return 0, StatusInvalidField | StatusDNR
}
