package nvme

import (
	"bytes"
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

const testNQN = "nqn.2026-01.io.nhd:test"

// harness drives a Fabric as a transport would.
type harness struct {
	t     testing.TB
	f     *Fabric
	admin *Queue
	io    *Queue
	cid   uint16
	kato  uint32 // Connect's KATO; 0 means 5000
}

func newFabric(disk nbd.Backend, bs int) *Fabric {
	return &Fabric{Subsystems: []*Subsystem{{NQN: testNQN, Namespaces: []Namespace{{Backend: disk, BlockSize: bs}}}}}
}

func (h *harness) exec(q *Queue, cmd Command, data []byte) Completion {
	h.t.Helper()
	h.cid++
	cmd.CID = h.cid
	cpl, held := q.Exec(context.Background(), &cmd, data)
	if held {
		h.t.Fatalf("command %v held", cmd.Opcode)
	}
	if cpl.CID != cmd.CID || cpl.SQID != q.ID() {
		h.t.Fatalf("completion %+v for CID %d on queue %d", cpl, cmd.CID, q.ID())
	}
	return cpl
}

func (h *harness) connect(q *Queue, qid uint16, cntlid uint16, subnqn string) Completion {
	var cmd Command
	kato := h.kato
	if kato == 0 {
		kato = 5000
	}
	Connect{QID: qid, SQSize: 31, KATO: kato}.Encode(&cmd)
	var d [ConnectDataSize]byte
	(&ConnectData{ControllerID: cntlid, SubNQN: subnqn, HostNQN: "nqn.host"}).Put(&d)
	return h.exec(q, cmd, d[:])
}

func (h *harness) prop(set bool, off uint32, v uint64) Completion {
	var cmd Command
	Property{Set: set, Size8: off == PropCAP, Offset: off, Value: v}.Encode(&cmd)
	return h.exec(h.admin, cmd, nil)
}

func (h *harness) ok(cpl Completion, what string) Completion {
	h.t.Helper()
	if cpl.Status != StatusSuccess {
		h.t.Fatalf("%s: %v", what, cpl.Status)
	}
	return cpl
}

// bringUp connects and enables a controller and one I/O queue, in the
// order a Linux host does.
func bringUp(t testing.TB, f *Fabric) *harness {
	return bringUpKATO(t, f, 0)
}

// bringUpKATO is bringUp with Connect's KATO (0: 5000 ms) and transports
// on both queues.
func bringUpKATO(t testing.TB, f *Fabric, kato uint32) *harness {
	h := &harness{t: t, f: f, admin: f.NewQueue(), io: f.NewQueue(), kato: kato}
	h.admin.Transport, h.io.Transport = &fakeTransport{}, &fakeTransport{}
	cntlid := uint16(h.ok(h.connect(h.admin, 0, DynamicControllerID, testNQN), "admin connect").Result)
	if cap := CAP(h.ok(h.prop(false, PropCAP, 0), "get CAP").Result); cap.MQES() != uint16(f.QueueDepth-1) || cap.MPSMin() != 0 {
		t.Fatalf("CAP %#x", uint64(cap))
	}
	h.ok(h.prop(true, PropCC, uint64(CCEnable)), "set CC")
	if CSTS(h.ok(h.prop(false, PropCSTS, 0), "get CSTS").Result)&CSTSReady == 0 {
		t.Fatal("not ready after CC.EN")
	}
	if h.ok(h.prop(false, PropVS, 0), "get VS").Result != Version1_3 {
		t.Fatal("VS")
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpSetFeatures, CDW10: FeatNumberOfQueues, CDW11: NumberOfQueues(4, 4)}, nil), "number of queues")
	h.ok(h.connect(h.io, 1, cntlid, testNQN), "I/O connect")
	return h
}

func TestControllerBringUp(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := bringUp(t, f)
	page := make([]byte, IdentifySize)
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSController}, page), "identify controller")
	var id IdentifyController
	id.Parse((*[IdentifySize]byte)(page))
	if id.ControllerID != h.admin.Controller().ID() || id.SubNQN != testNQN || id.NN != 1 || id.KAS == 0 ||
		id.SGLS&1 == 0 || id.ICDOFF != 0 || id.IOCCSZ < 4 || id.MaxCmd < 32 || id.VWC != 1 || id.ControllerType != ControllerIO {
		t.Fatalf("identify controller %+v", id)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSActiveNamespaces}, page), "ns list")
	if ids := ParseNamespaceList((*[IdentifySize]byte)(page), nil); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("ns list %v", ids)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, NSID: 1, CDW10: CNSNamespace}, page), "identify ns")
	var ns IdentifyNamespace
	ns.Parse((*[IdentifySize]byte)(page))
	if ns.Size != 2048 || ns.Capacity != 2048 || ns.BlockSize() != 512 || ns.LBAF[0].MetadataSize != 0 {
		t.Fatalf("identify ns %+v", ns)
	}
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, NSID: 1, CDW10: CNSNamespaceDescriptors}, page), "descriptors")
	ds := ParseNamespaceDescriptors((*[IdentifySize]byte)(page))
	if len(ds) != 3 || ds[0].Type != NIDTUUID || len(ds[0].Value) != 16 || ds[2].Type != NIDTCSI {
		t.Fatalf("descriptors %v", ds)
	}
	// A short buffer gets the start of the page.
	short := make([]byte, 100)
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSController}, short), "short identify")
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSController}, page), "identify controller")
	if !bytes.Equal(short, page[:100]) {
		t.Fatalf("short identify % x", short)
	}
	for _, tc := range []struct {
		name string
		cmd  Command
		want Status
	}{
		{"bad CNS", Command{Opcode: OpIdentify, CDW10: 0x55}, StatusInvalidField},
		{"ns 2", Command{Opcode: OpIdentify, NSID: 2, CDW10: CNSNamespace}, StatusInvalidNamespace},
		{"bad opcode", Command{Opcode: 0x7E}, StatusInvalidOpcode},
		{"bad feature", Command{Opcode: OpGetFeatures, CDW10: 0x77}, StatusInvalidField},
		{"bad log", Command{Opcode: OpGetLogPage, CDW10: 0x42 | 127<<16}, StatusInvalidField},
		{"discovery log on I/O controller", Command{Opcode: OpGetLogPage, CDW10: LogDiscovery | 255<<16}, StatusInvalidField},
		{"property set CAP", func() (c Command) { Property{Set: true, Offset: PropCAP}.Encode(&c); return }(), StatusInvalidField},
		{"connect again", func() (c Command) { Connect{SQSize: 1}.Encode(&c); return }(), StatusCommandSequence},
	} {
		if got := h.exec(h.admin, tc.cmd, make([]byte, IdentifySize)).Status; got.Code() != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := h.exec(h.admin, Command{Opcode: OpGetFeatures, CDW10: FeatNumberOfQueues}, nil); got.Result != uint64(NumberOfQueues(4, 4)) {
		t.Fatalf("get number of queues %#x", got.Result)
	}
	// The errors above are in the error log, newest first.
	logp := make([]byte, 4*ErrorLogEntrySize)
	h.ok(h.exec(h.admin, Command{Opcode: OpGetLogPage, CDW10: LogError | uint32(len(logp)/4-1)<<16}, logp), "error log")
	var e ErrorLogEntry
	e.Parse((*[ErrorLogEntrySize]byte)(logp))
	if e.Count != 8 || e.Status.Code() != StatusCommandSequence {
		t.Fatalf("newest error %+v", e)
	}
	smart := make([]byte, SMARTLogSize)
	h.ok(h.exec(h.io, Command{Opcode: OpRead, NSID: 1}, make([]byte, 512)), "read")
	h.ok(h.exec(h.admin, Command{Opcode: OpGetLogPage, CDW10: LogSMART | uint32(len(smart)/4-1)<<16}, smart), "smart")
	var s SMARTLog
	s.Parse((*[SMARTLogSize]byte)(smart))
	if s.HostReads != 1 || s.DataUnitsRead != 1 {
		t.Fatalf("smart %+v", s)
	}
	// AERs are held, up to the limit.
	for i := range aerLimit + 1 {
		cmd := Command{Opcode: OpAsyncEventRequest, CID: 31}
		cpl, held := h.admin.Exec(context.Background(), &cmd, nil)
		if held != (i < aerLimit) || (!held && cpl.Status.Code() != StatusAERLimitExceeded) {
			t.Fatalf("AER %d: held %v, %v", i, held, cpl.Status)
		}
	}
	// Shutdown completes at once; closing the admin queue ends I/O.
	h.ok(h.prop(true, PropCC, uint64(CCEnable|CCShutdown)), "shutdown")
	if CSTS(h.prop(false, PropCSTS, 0).Result)&CSTSShutdownMask != CSTSShutdownComplete {
		t.Fatal("shutdown not complete")
	}
	h.admin.Close()
	if _, aborted := transportOf(h.io).state(); aborted != 1 {
		t.Fatalf("I/O queue's transport aborted %d times after admin close", aborted)
	}
	// I/O that still arrives on the aborted queue is dropped unanswered.
	if cpl, held := h.io.Exec(context.Background(), &Command{Opcode: OpRead, NSID: 1, CID: 9}, make([]byte, 512)); !held {
		t.Fatalf("I/O after admin close answered: %v", cpl.Status)
	}
}

func TestControllerConnectErrors(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	h := &harness{t: t, f: f}
	q := f.NewQueue()
	if st := h.exec(q, Command{Opcode: OpIdentify}, nil).Status; st.Code() != StatusCommandSequence {
		t.Fatalf("before connect: %v", st)
	}
	cpl := h.connect(q, 0, DynamicControllerID, "nqn.unknown")
	if cpl.Status.Code() != StatusConnectInvalidParam || cpl.Result != 1<<16|ConnectOffsetSubNQN {
		t.Fatalf("unknown NQN: %v %#x", cpl.Status, cpl.Result)
	}
	if cpl := h.connect(q, 0, 7, testNQN); cpl.Status.Code() != StatusConnectInvalidParam || cpl.Result != 1<<16|ConnectOffsetCNTLID {
		t.Fatalf("static cntlid: %v %#x", cpl.Status, cpl.Result)
	}
	if cpl := h.connect(q, 1, 1, testNQN); cpl.Status.Code() != StatusConnectInvalidParam {
		t.Fatalf("I/O queue of no controller: %v", cpl.Status)
	}
	var short Command
	Connect{SQSize: 31}.Encode(&short)
	if st := h.exec(q, short, make([]byte, 10)).Status; st.Code() != StatusSGLLengthInvalid {
		t.Fatalf("short connect data: %v", st)
	}
	h.admin = q
	cntlid := uint16(h.ok(h.connect(q, 0, DynamicControllerID, testNQN), "admin").Result)
	if st := h.exec(q, Command{Opcode: OpIdentify}, make([]byte, IdentifySize)).Status; st.Code() != StatusCommandSequence {
		t.Fatalf("identify before CC.EN: %v", st)
	}
	io := f.NewQueue()
	if st := h.connect(io, 1, cntlid, testNQN).Status; st.Code() != StatusCommandSequence {
		t.Fatalf("I/O connect before CC.EN: %v", st)
	}
	// A bad CC sets CFS.
	h.ok(h.prop(true, PropCC, uint64(CCEnable&^(0xF<<16)|5<<16)), "set bad CC")
	if CSTS(h.prop(false, PropCSTS, 0).Result) != CSTSFatal {
		t.Fatal("bad IOSQES accepted")
	}
	h.ok(h.prop(true, PropCC, 0), "CC reset")
	h.ok(h.prop(true, PropCC, uint64(CCEnable)), "CC enable")
	if st := h.connect(io, 1, cntlid, testNQN).Status; st.Code() != StatusConnectInvalidParam {
		t.Fatalf("I/O connect before Number of Queues: %v", st)
	}
	h.ok(h.exec(q, Command{Opcode: OpSetFeatures, CDW10: FeatNumberOfQueues, CDW11: NumberOfQueues(2, 2)}, nil), "queues")
	if st := h.connect(io, 3, cntlid, testNQN).Status; st.Code() != StatusConnectInvalidParam {
		t.Fatalf("qid 3 of 2: %v", st)
	}
	h.ok(h.connect(io, 2, cntlid, testNQN), "qid 2")
	if st := h.connect(f.NewQueue(), 2, cntlid, testNQN).Status; st.Code() != StatusConnectInvalidParam {
		t.Fatalf("qid 2 twice: %v", st)
	}
	var big Command
	Connect{QID: 1, SQSize: uint16(f.QueueDepth)}.Encode(&big)
	var d [ConnectDataSize]byte
	(&ConnectData{ControllerID: cntlid, SubNQN: testNQN, HostNQN: "nqn.host"}).Put(&d)
	if cpl := h.exec(f.NewQueue(), big, d[:]); cpl.Status.Code() != StatusConnectInvalidParam || cpl.Result != ConnectOffsetSQSize {
		t.Fatalf("SQSIZE too big: %v %#x", cpl.Status, cpl.Result)
	}
}

func TestDiscoveryController(t *testing.T) {
	f := newFabric(nbd.NewMemDisk(1<<20), 0)
	f.Discovery = func(net.Addr) []DiscoveryLogEntry {
		return []DiscoveryLogEntry{{TrType: TransportTCP, Subtype: SubtypeNVM, SubNQN: testNQN, TrAddr: "127.0.0.1", TrSvcID: "4420"}}
	}
	h := &harness{t: t, f: f, admin: f.NewQueue()}
	cntlid := uint16(h.ok(h.connect(h.admin, 0, DynamicControllerID, DiscoveryNQN), "connect").Result)
	h.ok(h.prop(true, PropCC, uint64(CCEnable)), "enable")
	page := make([]byte, IdentifySize)
	h.ok(h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSController}, page), "identify")
	var id IdentifyController
	id.Parse((*[IdentifySize]byte)(page))
	if id.ControllerType != ControllerDiscovery || id.SubNQN != DiscoveryNQN || id.NN != 0 || id.SGLS&1 == 0 {
		t.Fatalf("discovery identify %+v", id)
	}
	var cmd Command
	GetLogPage{LID: LogDiscovery, Length: 2048}.Encode(&cmd)
	log := make([]byte, 2048)
	h.ok(h.exec(h.admin, cmd, log), "discovery log")
	var hd DiscoveryLogHeader
	hd.Parse((*[DiscoveryLogPageSize]byte)(log))
	var e DiscoveryLogEntry
	e.Parse((*[DiscoveryLogPageSize]byte)(log[1024:]))
	if hd.NumRec != 1 || e.SubNQN != testNQN || e.TrSvcID != "4420" {
		t.Fatalf("discovery log %+v %+v", hd, e)
	}
	GetLogPage{LID: LogDiscovery, Length: 1024, Offset: 1024}.Encode(&cmd)
	h.ok(h.exec(h.admin, cmd, log[:1024]), "discovery log at offset")
	if e.Parse((*[DiscoveryLogPageSize]byte)(log)); e.SubNQN != testNQN {
		t.Fatalf("entry at offset 1024: %+v", e)
	}
	if st := h.connect(f.NewQueue(), 1, cntlid, DiscoveryNQN).Status; st.Code() != StatusConnectInvalidParam {
		t.Fatalf("I/O queue on discovery: %v", st)
	}
	if st := h.exec(h.admin, Command{Opcode: OpIdentify, CDW10: CNSActiveNamespaces}, page).Status; st.Code() != StatusInvalidField {
		t.Fatalf("namespace list on discovery: %v", st)
	}
}

// failing is a backend whose every call fails with err.
type failing struct {
	nbd.Backend
	err error
}

func (f failing) ReadAt(p []byte, off int64) (int, error)  { return 0, f.err }
func (f failing) WriteAt(p []byte, off int64) (int, error) { return 0, f.err }

func TestControllerBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		err   error
		errno syscall.Errno
	}{
		{nbd.EIO, syscall.EIO},
		{syscall.ENOSPC, syscall.ENOSPC},
		{nbd.ErrReadOnly, syscall.EPERM},
	} {
		h := bringUp(t, newFabric(failing{nbd.NewMemDisk(1 << 20), tc.err}, 0))
		cmd := Command{Opcode: OpWrite, NSID: 1}
		st := h.exec(h.io, cmd, make([]byte, 512)).Status
		if !errors.Is(st, tc.errno) {
			t.Errorf("backend %v: status %v is not %v", tc.err, st, tc.errno)
		}
	}
}
