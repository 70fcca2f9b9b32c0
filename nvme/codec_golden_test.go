package nvme

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nbd"
)

// unhex decodes a hex dump with spaces and newlines.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden SQEs and CQEs laid out by hand from NVMe Base 2.0 figures 88/89
// and NVMe over Fabrics 1.1 figure 19: the admin Connect a Linux host
// sends (SQSIZE 31, KATO 5000 ms, 1024 bytes in-capsule), a Read of 8
// blocks through a transport SGL, and their completions.
func TestGoldenCommands(t *testing.T) {
	connect := Command{Opcode: OpFabrics, Flags: FlagSGL, CID: 5, SGL: SGL{Length: 1024, Type: SGLDataBlockOffset}}
	Connect{SQSize: 31, KATO: 5000}.Encode(&connect)
	read := Command{Opcode: OpRead, Flags: FlagSGL, CID: 0x1003, NSID: 1, SGL: SGL{Length: 4096, Type: SGLTransportDataBlock}}
	read.SetRange(0x123456789A, 8)
	for _, tc := range []struct {
		name string
		cmd  Command
		want string
	}{
		{"connect", connect, `7f400500 01000000 00000000 00000000 0000000000000000
			0000000000000000 00040000 00000001 00000000 1f000000 88130000 00000000 0000000000000000`},
		{"read", read, `02400310 01000000 00000000 00000000 0000000000000000
			0000000000000000 00100000 0000005a 9a785634 12000000 07000000 00000000 0000000000000000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [CommandSize]byte
			tc.cmd.Put(&b)
			if want := unhex(t, tc.want); string(b[:]) != string(want) {
				t.Fatalf("Put:\n got % x\nwant % x", b[:], want)
			}
			var back Command
			back.Parse(&b)
			if diff := cmp.Diff(tc.cmd, back); diff != "" {
				t.Fatalf("Parse (-want +got):\n%s", diff)
			}
		})
	}
	if k := ConnectOf(&connect); k != (Connect{SQSize: 31, KATO: 5000}) || connect.Direction() != DirHostToCtrl {
		t.Fatalf("ConnectOf = %+v, direction %d", k, connect.Direction())
	}
	if read.LBA() != 0x123456789A || read.Blocks() != 8 || read.Direction() != DirCtrlToHost {
		t.Fatalf("read: LBA %#x blocks %d direction %d", read.LBA(), read.Blocks(), read.Direction())
	}
}

func TestGoldenCompletions(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpl  Completion
		want string
	}{
		{"connect", Completion{Result: 1, SQHead: 1, CID: 5}, "01000000 00000000 0100 0000 0500 0000"},
		// Invalid Field | DNR is 0x4002; on the wire shifted by the phase tag: 0x8004.
		{"invalid field", Completion{SQHead: 7, SQID: 2, CID: 0x2001, Status: StatusInvalidField | StatusDNR}, "00000000 00000000 0700 0200 0120 0480"},
		{"property get cap", Completion{Result: 0x0000_0820_0F00_03FF}, "ff03000f 20080000 0000 0000 0000 0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [CompletionSize]byte
			tc.cpl.Put(&b)
			if want := unhex(t, tc.want); string(b[:]) != string(want) {
				t.Fatalf("Put:\n got % x\nwant % x", b[:], want)
			}
			var back Completion
			back.Parse(&b)
			if back != tc.cpl {
				t.Fatalf("Parse = %+v, want %+v", back, tc.cpl)
			}
		})
	}
	// The phase tag is dropped.
	var b [CompletionSize]byte
	b[14] = 1
	var c Completion
	c.Parse(&b)
	if c.Status != StatusSuccess {
		t.Fatalf("phase tag read as status %v", c.Status)
	}
}

// The register values of nvme-tcp-facts §4: nvmet's CAP, the Linux host's
// CC writes.
func TestGoldenRegisters(t *testing.T) {
	nvmet := CAP(1<<37 | 1<<43 | 15<<24 | 1023)
	if nvmet.MQES() != 1023 || nvmet.Timeout() != 15 || nvmet.CSS() != 0x41 || nvmet.MPSMin() != 0 {
		t.Fatalf("CAP %#x: MQES %d TO %d CSS %#x MPSMIN %d", uint64(nvmet), nvmet.MQES(), nvmet.Timeout(), nvmet.CSS(), nvmet.MPSMin())
	}
	if MakeCAP(1023, 15) != nvmet&^(1<<43) {
		t.Fatalf("MakeCAP = %#x", uint64(MakeCAP(1023, 15)))
	}
	if CCEnable != 0x00460001 || CCEnable|CCShutdown != 0x00464001 {
		t.Fatalf("CCEnable %#x, shutdown %#x", uint32(CCEnable), uint32(CCEnable|CCShutdown))
	}
	cc := CC(0x00460061)
	if !cc.Enable() || cc.CSS() != 6 || cc.IOSQES() != 6 || cc.IOCQES() != 4 || cc.SHN() != 0 || cc.MPS() != 0 || cc.AMS() != 0 {
		t.Fatalf("CC %#x fields wrong", uint32(cc))
	}
	if NumberOfQueues(4, 4) != 0x00030003 {
		t.Fatalf("NumberOfQueues(4, 4) = %#x", NumberOfQueues(4, 4))
	}
	if sq, cq := QueuesOf(0x0001_0007); sq != 8 || cq != 2 {
		t.Fatalf("QueuesOf = %d, %d", sq, cq)
	}
	var get Command
	Property{Size8: true, Offset: PropCAP}.Encode(&get)
	var b [CommandSize]byte
	get.Put(&b)
	if b[0] != 0x7F || b[4] != 4 || b[40] != 1 || b[44] != 0 {
		t.Fatalf("Property Get CAP: % x", b[:])
	}
	var set Command
	Property{Set: true, Offset: PropCC, Value: uint64(CCEnable)}.Encode(&set)
	set.Put(&b)
	if want := unhex(t, "00000000 14000000 01004600 00000000"); b[4] != 0 || string(b[40:56]) != string(want) {
		t.Fatalf("Property Set CC: % x", b[:])
	}
}

func TestGoldenIdentify(t *testing.T) {
	id := IdentifyController{
		Serial: "SN1", Model: "nhd", Firmware: "1.0", MDTS: 5, ControllerID: 0x0102, Version: Version1_3,
		ControllerType: ControllerIO, KAS: 10, SQES: 0x66, CQES: 0x44, MaxCmd: 128, NN: 1,
		ONCS: ONCSWriteZeroes | ONCSDatasetManagement, VWC: 1, SGLS: 1, SubNQN: "nqn.x", IOCCSZ: 516, IORCSZ: 1, MSDBD: 1,
	}
	var b [IdentifySize]byte
	id.Put(&b)
	for _, f := range []struct {
		off  int
		want string
	}{
		{4, "534e3120202020202020202020202020 20202020"}, // "SN1" space padded to 20
		{64, "312e302020202020"},
		{77, "05 0201 00030100"},
		{111, "01"},
		{320, "0a00"},
		{512, "6644 8000 01000000 0c00"},
		{525, "01"},
		{536, "01000000"},
		{768, "6e716e2e7800"},
		{1792, "04020000 01000000 0000 00 01"},
	} {
		want := unhex(t, f.want)
		if got := b[f.off : f.off+len(want)]; string(got) != string(want) {
			t.Errorf("offset %d: % x, want % x", f.off, got, want)
		}
	}
	var back IdentifyController
	back.Parse(&b)
	if diff := cmp.Diff(id, back); diff != "" {
		t.Fatalf("Parse (-want +got):\n%s", diff)
	}

	ns := IdentifyNamespace{Size: 0x20000, Capacity: 0x20000, Utilization: 0x20000, DLFEAT: 1}
	ns.LBAF[0] = LBAFormat{LBADS: 12}
	ns.Put(&b)
	if want := unhex(t, "0000020000000000"); string(b[0:8]) != string(want) || b[33] != 1 || b[130] != 12 || b[26] != 0 {
		t.Fatalf("Identify Namespace: % x ... LBAF0 % x", b[:34], b[128:132])
	}
	if ns.BlockSize() != 4096 {
		t.Fatalf("BlockSize = %d", ns.BlockSize())
	}

	PutNamespaceList(&b, []uint32{1, 2, 0x01020304})
	if want := unhex(t, "01000000 02000000 04030201 00000000"); string(b[:16]) != string(want) {
		t.Fatalf("namespace list % x", b[:16])
	}
	if got := ParseNamespaceList(&b, nil); !cmp.Equal(got, []uint32{1, 2, 0x01020304}) {
		t.Fatalf("ParseNamespaceList = %v", got)
	}
	PutNamespaceDescriptors(&b, []NamespaceDescriptor{{NIDTCSI, []byte{0}}, {NIDTEUI64, []byte{1, 2, 3, 4, 5, 6, 7, 8}}})
	if want := unhex(t, "04010000 00 01080000 0102030405060708 0000"); string(b[:19]) != string(want) {
		t.Fatalf("descriptors % x", b[:19])
	}
}

func TestGoldenLogs(t *testing.T) {
	e := DiscoveryLogEntry{TrType: TransportTCP, AdrFam: AddressIPv4, Subtype: SubtypeNVM, TReq: TREQSQFlowDisable,
		PortID: 1, ControllerID: DynamicControllerID, ASQSZ: 32, TrSvcID: "4420", SubNQN: "nqn.a", TrAddr: "127.0.0.1"}
	var b [DiscoveryLogPageSize]byte
	e.Put(&b)
	for _, f := range []struct {
		off  int
		want string
	}{
		{0, "03010204 0100 ffff 2000 0000"},
		{32, "3434323000"},
		{256, "6e716e2e6100"},
		{512, "3132372e302e302e3100"},
		{768, "00"},
	} {
		want := unhex(t, f.want)
		if got := b[f.off : f.off+len(want)]; string(got) != string(want) {
			t.Errorf("entry offset %d: % x, want % x", f.off, got, want)
		}
	}
	var back DiscoveryLogEntry
	back.Parse(&b)
	if back != e {
		t.Fatalf("entry Parse = %+v", back)
	}
	h := DiscoveryLogHeader{GenCtr: 3, NumRec: 2}
	h.Put(&b)
	if want := unhex(t, "0300000000000000 0200000000000000 0000"); string(b[:18]) != string(want) {
		t.Fatalf("header % x", b[:18])
	}

	var c Command
	GetLogPage{LID: LogDiscovery, RAE: true, Length: 1024 + 3*1024, Offset: 4096}.Encode(&c)
	if c.CDW10 != 0x03FF_8070 || c.CDW11 != 0 || c.CDW12 != 4096 || c.CDW13 != 0 {
		t.Fatalf("Get Log Page: CDW10 %#x CDW11 %#x CDW12 %#x", c.CDW10, c.CDW11, c.CDW12)
	}
	if g := LogPageOf(&c); g != (GetLogPage{LID: LogDiscovery, RAE: true, Length: 4096, Offset: 4096}) {
		t.Fatalf("LogPageOf = %+v", g)
	}

	s := SMARTLog{Temperature: 300, AvailableSpare: 100, HostReads: 7, PowerOnHours: 9}
	var sb [SMARTLogSize]byte
	s.Put(&sb)
	if sb[1] != 0x2c || sb[2] != 1 || sb[3] != 100 || sb[64] != 7 || sb[128] != 9 {
		t.Fatalf("SMART % x", sb[:140])
	}
	el := ErrorLogEntry{Count: 1, SQID: 1, CID: 2, Status: StatusLBAOutOfRange | StatusDNR, LBA: 5, NSID: 1}
	var eb [ErrorLogEntrySize]byte
	el.Put(&eb)
	if want := unhex(t, "0100000000000000 0100 0200 0081 0000 0500000000000000 01000000"); string(eb[:28]) != string(want) {
		t.Fatalf("error log entry % x", eb[:28])
	}
	var d ConnectData
	d.HostID[0] = 0xAA
	d.ControllerID = 0xFFFF
	d.SubNQN, d.HostNQN = "nqn.s", "nqn.h"
	var db [ConnectDataSize]byte
	d.Put(&db)
	if db[0] != 0xAA || db[16] != 0xFF || db[17] != 0xFF || string(db[256:262]) != "nqn.s\x00" || string(db[512:518]) != "nqn.h\x00" {
		t.Fatalf("connect data % x", db[:32])
	}
	var r DSMRange
	(&DSMRange{Attributes: 0, Blocks: 8, LBA: 0x10}).Put((*[DSMRangeSize]byte)(db[:]))
	if want := unhex(t, "00000000 08000000 1000000000000000"); string(db[:16]) != string(want) {
		t.Fatalf("DSM range % x", db[:16])
	}
	r.Parse((*[DSMRangeSize]byte)(db[:]))
	if r.Blocks != 8 || r.LBA != 0x10 {
		t.Fatalf("DSM Parse = %+v", r)
	}
}

func TestStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		st    Status
		errno syscall.Errno
	}{
		{StatusInternalError, syscall.EIO},
		{StatusUnrecoveredRead, syscall.EIO},
		{StatusDataTransferError | StatusDNR, syscall.EIO},
		{StatusInvalidField | StatusDNR, syscall.EINVAL},
		{StatusLBAOutOfRange | StatusDNR, syscall.EINVAL},
		{StatusConnectInvalidHost, syscall.EINVAL},
		{StatusInvalidOpcode, syscall.ENOTSUP},
		{StatusCapacityExceeded, syscall.ENOSPC},
		{StatusNamespaceProtected, syscall.EPERM},
		{StatusAbortedSQDeletion, syscall.ESHUTDOWN},
	} {
		err := fmt.Errorf("wrapped: %w", tc.st)
		if !errors.Is(err, tc.errno) || !errors.Is(err, nbd.Errno(tc.errno)) || !errors.Is(err, tc.st.Code()) {
			t.Errorf("%v: errors.Is fails for %v", tc.st, tc.errno)
		}
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, StatusCIDConflict) {
			t.Errorf("%v matches what it is not", tc.st)
		}
		// A backend's errno chooses a status of the same errno.
		if back := StatusOf(tc.errno).Errno(); back != tc.errno && tc.errno != syscall.EIO {
			t.Errorf("StatusOf(%v).Errno() = %v", tc.errno, back)
		}
	}
	for _, tc := range []struct {
		err  error
		want Status
	}{
		{nil, StatusSuccess},
		{nbd.EIO, StatusInternalError},
		{fmt.Errorf("x: %w", nbd.ENOSPC), StatusCapacityExceeded | StatusDNR},
		{syscall.EROFS, StatusNamespaceProtected | StatusDNR},
		{nbd.ErrReadOnly, StatusNamespaceProtected | StatusDNR},
		{errors.New("other"), StatusInternalError},
		{fmt.Errorf("%w", StatusLBAOutOfRange), StatusLBAOutOfRange},
	} {
		if got := StatusOf(tc.err); got != tc.want {
			t.Errorf("StatusOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if s := (StatusInvalidField | StatusDNR).Error(); s != "nvme: invalid field (DNR)" {
		t.Fatalf("Error() = %q", s)
	}
	if StatusSuccess.Errno() != 0 || errors.Is(StatusSuccess, syscall.Errno(0)) {
		t.Fatal("success maps to an errno")
	}
}
