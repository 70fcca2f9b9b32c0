package nvme

import "encoding/binary"

// Log page identifiers (Get Log Page CDW10 bits 7:0).
const (
	LogError    = 0x01
	LogSMART    = 0x02
	LogFirmware = 0x03
	// LogChangedNamespaces is the Changed Namespace List: up to 1024
	// namespace ids, as in an Active Namespace ID list.
	LogChangedNamespaces = 0x04
	LogDiscovery         = 0x70
)

// ErrorLogEntrySize is the size of one Error Information log entry.
const ErrorLogEntrySize = 64

// ErrorLogEntry is one entry of the Error Information log (NVMe Base 2.0,
// figure 205):
//
//	0   error count u64       8   SQID u16      10  CID u16
//	12  status field u16 (phase tag in bit 0)   14  parameter error location u16
//	16  LBA u64               24  NSID u32      29  transport type u8
type ErrorLogEntry struct {
	Count    uint64
	SQID     uint16
	CID      uint16
	Status   Status
	Location uint16
	LBA      uint64
	NSID     uint32
	TrType   uint8
}

// Put encodes e into b.
func (e *ErrorLogEntry) Put(b *[ErrorLogEntrySize]byte) {
	le := binary.LittleEndian
	clear(b[:])
	le.PutUint64(b[0:], e.Count)
	le.PutUint16(b[8:], e.SQID)
	le.PutUint16(b[10:], e.CID)
	le.PutUint16(b[12:], uint16(e.Status)<<1)
	le.PutUint16(b[14:], e.Location)
	le.PutUint64(b[16:], e.LBA)
	le.PutUint32(b[24:], e.NSID)
	b[29] = e.TrType
}

// Parse decodes b into e.
func (e *ErrorLogEntry) Parse(b *[ErrorLogEntrySize]byte) {
	le := binary.LittleEndian
	*e = ErrorLogEntry{
		Count: le.Uint64(b[0:]), SQID: le.Uint16(b[8:]), CID: le.Uint16(b[10:]),
		Status: Status(le.Uint16(b[12:]) >> 1), Location: le.Uint16(b[14:]),
		LBA: le.Uint64(b[16:]), NSID: le.Uint32(b[24:]), TrType: b[29],
	}
}

// SMARTLogSize is the size of the SMART / Health Information log.
const SMARTLogSize = 512

// SMARTLog is the SMART / Health Information log (NVMe Base 2.0, figure
// 207). The 128-bit counters are kept to their low 64 bits.
//
//	0   critical warning u8   1   composite temperature u16 (kelvin)
//	3   available spare u8    4   spare threshold u8   5   percentage used u8
//	32  data units read       48  data units written (1000 × 512 bytes)
//	64  host read commands    80  host write commands
//	112 power cycles          128 power on hours
//	144 unsafe shutdowns      160 media errors     176 error log entries
type SMARTLog struct {
	CriticalWarning  uint8
	Temperature      uint16
	AvailableSpare   uint8
	SpareThreshold   uint8
	PercentUsed      uint8
	DataUnitsRead    uint64
	DataUnitsWritten uint64
	HostReads        uint64
	HostWrites       uint64
	PowerCycles      uint64
	PowerOnHours     uint64
	UnsafeShutdowns  uint64
	MediaErrors      uint64
	ErrorLogEntries  uint64
}

// Put encodes s into b.
func (s *SMARTLog) Put(b *[SMARTLogSize]byte) {
	le := binary.LittleEndian
	clear(b[:])
	b[0] = s.CriticalWarning
	le.PutUint16(b[1:], s.Temperature)
	b[3], b[4], b[5] = s.AvailableSpare, s.SpareThreshold, s.PercentUsed
	for i, v := range [...]uint64{s.DataUnitsRead, s.DataUnitsWritten, s.HostReads, s.HostWrites} {
		le.PutUint64(b[32+16*i:], v)
	}
	for i, v := range [...]uint64{s.PowerCycles, s.PowerOnHours, s.UnsafeShutdowns, s.MediaErrors, s.ErrorLogEntries} {
		le.PutUint64(b[112+16*i:], v)
	}
}

// Parse decodes b into s.
func (s *SMARTLog) Parse(b *[SMARTLogSize]byte) {
	le := binary.LittleEndian
	*s = SMARTLog{
		CriticalWarning: b[0], Temperature: le.Uint16(b[1:]), AvailableSpare: b[3],
		SpareThreshold: b[4], PercentUsed: b[5],
		DataUnitsRead: le.Uint64(b[32:]), DataUnitsWritten: le.Uint64(b[48:]),
		HostReads: le.Uint64(b[64:]), HostWrites: le.Uint64(b[80:]),
		PowerCycles: le.Uint64(b[112:]), PowerOnHours: le.Uint64(b[128:]),
		UnsafeShutdowns: le.Uint64(b[144:]), MediaErrors: le.Uint64(b[160:]),
		ErrorLogEntries: le.Uint64(b[176:]),
	}
}

// DiscoveryNQN is the well-known NQN of a discovery subsystem.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// DiscoveryLogPageSize is the size of the discovery log header and of each
// entry.
const DiscoveryLogPageSize = 1024

// DiscoveryLogHeader opens the Discovery log page (NVMe over Fabrics 1.1,
// figure 31): 0 GENCTR u64, 8 NUMREC u64, 16 RECFMT u16, the rest reserved.
type DiscoveryLogHeader struct {
	GenCtr uint64
	NumRec uint64
	RecFmt uint16
}

// Put encodes h into b.
func (h *DiscoveryLogHeader) Put(b *[DiscoveryLogPageSize]byte) {
	clear(b[:])
	binary.LittleEndian.PutUint64(b[0:], h.GenCtr)
	binary.LittleEndian.PutUint64(b[8:], h.NumRec)
	binary.LittleEndian.PutUint16(b[16:], h.RecFmt)
}

// Parse decodes b into h.
func (h *DiscoveryLogHeader) Parse(b *[DiscoveryLogPageSize]byte) {
	*h = DiscoveryLogHeader{
		GenCtr: binary.LittleEndian.Uint64(b[0:]), NumRec: binary.LittleEndian.Uint64(b[8:]),
		RecFmt: binary.LittleEndian.Uint16(b[16:]),
	}
}

// Discovery log entry values.
const (
	TransportTCP        = 3 // TRTYPE
	AddressIPv4         = 1 // ADRFAM
	AddressIPv6         = 2
	SubtypeReferral     = 1 // SUBTYPE
	SubtypeNVM          = 2
	SubtypeDiscovery    = 3
	TREQSQFlowDisable   = 1 << 2 // TREQ: SQ flow control disable supported
	DynamicControllerID = 0xFFFF
)

// DiscoveryLogEntry is one Discovery log page entry (NVMe over Fabrics
// 1.1, figure 32):
//
//	0   TRTYPE u8     1   ADRFAM u8     2   SUBTYPE u8    3   TREQ u8
//	4   PORTID u16    6   CNTLID u16    8   ASQSZ u16     10  EFLAGS u16
//	32  TRSVCID (32 ASCII)    256 SUBNQN (256)    512 TRADDR (256 ASCII)
//	768 TSAS (256): for TCP, byte 0 is SECTYPE
type DiscoveryLogEntry struct {
	TrType       uint8
	AdrFam       uint8
	Subtype      uint8
	TReq         uint8
	PortID       uint16
	ControllerID uint16
	ASQSZ        uint16
	EFlags       uint16
	TrSvcID      string
	SubNQN       string
	TrAddr       string
	SecType      uint8
}

// Put encodes e into b.
func (e *DiscoveryLogEntry) Put(b *[DiscoveryLogPageSize]byte) {
	le := binary.LittleEndian
	clear(b[:])
	b[0], b[1], b[2], b[3] = e.TrType, e.AdrFam, e.Subtype, e.TReq
	le.PutUint16(b[4:], e.PortID)
	le.PutUint16(b[6:], e.ControllerID)
	le.PutUint16(b[8:], e.ASQSZ)
	le.PutUint16(b[10:], e.EFlags)
	putPadded(b[32:64], e.TrSvcID, 0)
	putPadded(b[256:512], e.SubNQN, 0)
	putPadded(b[512:768], e.TrAddr, 0)
	b[768] = e.SecType
}

// Parse decodes b into e.
func (e *DiscoveryLogEntry) Parse(b *[DiscoveryLogPageSize]byte) {
	le := binary.LittleEndian
	*e = DiscoveryLogEntry{
		TrType: b[0], AdrFam: b[1], Subtype: b[2], TReq: b[3],
		PortID: le.Uint16(b[4:]), ControllerID: le.Uint16(b[6:]), ASQSZ: le.Uint16(b[8:]),
		EFlags: le.Uint16(b[10:]), TrSvcID: trimNUL(b[32:64]), SubNQN: trimNUL(b[256:512]),
		TrAddr: trimNUL(b[512:768]), SecType: b[768],
	}
}

// GetLogPage describes the log page a Get Log Page command asks for.
type GetLogPage struct {
	LID    uint8
	LSP    uint8 // 7 bits
	RAE    bool
	Length uint64 // bytes, a multiple of 4, from 4 to 1<<34
	Offset uint64 // LPO, bytes
}

// LogPageOf decodes the Get Log Page fields of c: CDW10 bits 7:0 LID,
// 14:8 LSP, 15 RAE, 31:16 NUMDL; CDW11 bits 15:0 NUMDU; CDW12-13 LPO.
func LogPageOf(c *Command) GetLogPage {
	numd := uint32(c.CDW10>>16) | uint32(c.CDW11&0xFFFF)<<16
	return GetLogPage{
		LID: uint8(c.CDW10), LSP: uint8(c.CDW10>>8) & 0x7F, RAE: c.CDW10&(1<<15) != 0,
		Length: (uint64(numd) + 1) * 4, Offset: uint64(c.CDW12) | uint64(c.CDW13)<<32,
	}
}

// Encode sets the Get Log Page fields of c (opcode included); Length is
// rounded down to whole dwords.
func (g GetLogPage) Encode(c *Command) {
	numd := uint32(g.Length/4 - 1)
	c.Opcode = OpGetLogPage
	c.CDW10 = uint32(g.LID) | uint32(g.LSP&0x7F)<<8 | numd<<16
	if g.RAE {
		c.CDW10 |= 1 << 15
	}
	c.CDW11 = numd >> 16
	c.CDW12, c.CDW13 = uint32(g.Offset), uint32(g.Offset>>32)
}
