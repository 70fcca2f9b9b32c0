package nvme

import "encoding/binary"

// ConnectDataSize is the size of a Connect command's data.
const ConnectDataSize = 1024

// Connect holds the SQE fields of a Fabrics Connect command (NVMe over
// Fabrics 1.1, figure 19): CDW10 RECFMT u16 | QID u16 << 16; CDW11 SQSIZE
// u16 (0's based) | CATTR u8 << 16; CDW12 KATO u32 (milliseconds).
type Connect struct {
	RecFmt uint16
	QID    uint16
	SQSize uint16 // 0's based
	CATTR  uint8  // bit 2: disable SQ flow control
	KATO   uint32 // ms
}

// CATTRNoSQFlow is the CATTR bit that disables SQ flow control.
const CATTRNoSQFlow = 1 << 2

// ConnectOf decodes the Connect fields of c.
func ConnectOf(c *Command) Connect {
	return Connect{
		RecFmt: uint16(c.CDW10), QID: uint16(c.CDW10 >> 16),
		SQSize: uint16(c.CDW11), CATTR: uint8(c.CDW11 >> 16), KATO: c.CDW12,
	}
}

// Encode sets c to a Connect command with these fields (opcode, FCTYPE and
// the fields; CID and SGL are left alone).
func (k Connect) Encode(c *Command) {
	c.Opcode, c.NSID = OpFabrics, uint32(FabricsConnect)
	c.CDW10 = uint32(k.RecFmt) | uint32(k.QID)<<16
	c.CDW11 = uint32(k.SQSize) | uint32(k.CATTR)<<16
	c.CDW12 = k.KATO
}

// ConnectData is the data of a Connect command (NVMe over Fabrics 1.1,
// figure 20):
//
//	0    HOSTID (16)      16   CNTLID u16 (0xFFFF: any, on the admin queue)
//	256  SUBNQN (256, NUL ended)     512 HOSTNQN (256, NUL ended)
type ConnectData struct {
	HostID       [16]byte
	ControllerID uint16
	SubNQN       string
	HostNQN      string
}

// Put encodes d into b.
func (d *ConnectData) Put(b *[ConnectDataSize]byte) {
	clear(b[:])
	copy(b[0:16], d.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], d.ControllerID)
	putPadded(b[256:512], d.SubNQN, 0)
	putPadded(b[512:768], d.HostNQN, 0)
}

// Parse decodes b into d.
func (d *ConnectData) Parse(b *[ConnectDataSize]byte) {
	copy(d.HostID[:], b[0:16])
	d.ControllerID = binary.LittleEndian.Uint16(b[16:])
	d.SubNQN = trimNUL(b[256:512])
	d.HostNQN = trimNUL(b[512:768])
}

// Connect's data offsets that a Connect Invalid Parameters status names
// in its result (with bit 16 set for the data).
const (
	ConnectOffsetCNTLID  = 16
	ConnectOffsetSubNQN  = 256
	ConnectOffsetHostNQN = 512
	ConnectOffsetQID     = 42 // in the SQE
	ConnectOffsetSQSize  = 44 // in the SQE
)

// Property is a Property Get or Set (NVMe over Fabrics 1.1, figures 22 and
// 24): CDW10 bits 2:0 ATTRIB (0: 4 bytes, 1: 8 bytes), CDW11 OFST, CDW12-13
// VALUE (Set only).
type Property struct {
	Set    bool
	Size8  bool
	Offset uint32
	Value  uint64
}

// PropertyOf decodes a Property Get or Set command.
func PropertyOf(c *Command) Property {
	return Property{
		Set: c.FabricsType() == FabricsPropertySet, Size8: c.CDW10&7 == 1,
		Offset: c.CDW11, Value: uint64(c.CDW12) | uint64(c.CDW13)<<32,
	}
}

// Encode sets c to the Property Get or Set p.
func (p Property) Encode(c *Command) {
	c.Opcode, c.NSID = OpFabrics, uint32(FabricsPropertyGet)
	c.CDW10, c.CDW11, c.CDW12, c.CDW13 = 0, p.Offset, 0, 0
	if p.Size8 {
		c.CDW10 = 1
	}
	if p.Set {
		c.NSID = uint32(FabricsPropertySet)
		c.CDW12, c.CDW13 = uint32(p.Value), uint32(p.Value>>32)
	}
}

// Controller register offsets (properties) of a fabrics controller.
const (
	PropCAP  = 0x00 // 8 bytes
	PropVS   = 0x08
	PropCC   = 0x14
	PropCSTS = 0x1C
)

// CAP is the Controller Capabilities property (NVMe Base 2.0, figure 36).
type CAP uint64

// MQES is the largest queue size supported, 0's based (bits 15:0).
func (c CAP) MQES() uint16 { return uint16(c) }

// Timeout is the worst-case ready time in 500 ms units (bits 31:24).
func (c CAP) Timeout() uint8 { return uint8(c >> 24) }

// CSS is the command sets supported (bits 44:37; bit 0 the NVM command set).
func (c CAP) CSS() uint8 { return uint8(c >> 37) }

// MPSMin is the minimum memory page size, 2^(12+MPSMIN) (bits 51:48).
func (c CAP) MPSMin() uint8 { return uint8(c>>48) & 0xF }

// MakeCAP builds a CAP with MQES mqes, TO timeout and the NVM command set.
func MakeCAP(mqes uint16, timeout uint8) CAP {
	return CAP(mqes) | CAP(timeout)<<24 | 1<<37
}

// CC is the Controller Configuration property (NVMe Base 2.0, figure 41).
type CC uint32

// Fields of CC.
func (c CC) Enable() bool  { return c&1 != 0 }
func (c CC) CSS() uint8    { return uint8(c>>4) & 7 }
func (c CC) MPS() uint8    { return uint8(c>>7) & 0xF }
func (c CC) AMS() uint8    { return uint8(c>>11) & 7 }
func (c CC) SHN() uint8    { return uint8(c>>14) & 3 }
func (c CC) IOSQES() uint8 { return uint8(c>>16) & 0xF }
func (c CC) IOCQES() uint8 { return uint8(c>>20) & 0xF }

// CCEnable is what a host writes to enable a controller: EN, IOSQES 6
// (64 bytes), IOCQES 4 (16 bytes), the NVM command set, 4 KiB pages.
const CCEnable CC = 1 | 6<<16 | 4<<20

// CCShutdown is the SHN value of a normal shutdown, in place.
const CCShutdown CC = 1 << 14

// CSTS is the Controller Status property (NVMe Base 2.0, figure 42).
type CSTS uint32

// Bits of CSTS.
const (
	CSTSReady            CSTS = 1 << 0
	CSTSFatal            CSTS = 1 << 1
	CSTSShutdownComplete CSTS = 2 << 2 // SHST = 2
	CSTSShutdownMask     CSTS = 3 << 2
)

// Version numbers for VS and VER: major<<16 | minor<<8 | tertiary.
const (
	Version1_3 = 0x00010300
	Version1_4 = 0x00010400
)

// Feature identifiers (Get/Set Features CDW10 bits 7:0).
const (
	FeatArbitration        = 0x01
	FeatPowerManagement    = 0x02
	FeatTemperature        = 0x04
	FeatErrorRecovery      = 0x05
	FeatVolatileWriteCache = 0x06
	FeatNumberOfQueues     = 0x07
	FeatInterruptCoalesce  = 0x08
	FeatWriteAtomicity     = 0x0A
	FeatAsyncEventConfig   = 0x0B
	FeatTimestamp          = 0x0E
	FeatKeepAliveTimer     = 0x0F
	FeatHostBehavior       = 0x16
)

// NumberOfQueues packs a Number of Queues value (CDW11 of Set Features, DW0
// of its completion): submission queues in bits 15:0, completion queues in
// bits 31:16, both 0's based.
func NumberOfQueues(sq, cq uint16) uint32 { return uint32(sq-1) | uint32(cq-1)<<16 }

// QueuesOf unpacks a Number of Queues value into counts (1's based).
func QueuesOf(v uint32) (sq, cq int) { return int(v&0xFFFF) + 1, int(v>>16) + 1 }

// DSMRangeSize is the size of one Dataset Management range.
const DSMRangeSize = 16

// DSMRange is one Dataset Management range (NVM Command Set 1.0, figure
// 39): 0 context attributes u32, 4 length in blocks u32 (not 0's based),
// 8 starting LBA u64.
type DSMRange struct {
	Attributes uint32
	Blocks     uint32
	LBA        uint64
}

// Put encodes r into b.
func (r *DSMRange) Put(b *[DSMRangeSize]byte) {
	binary.LittleEndian.PutUint32(b[0:], r.Attributes)
	binary.LittleEndian.PutUint32(b[4:], r.Blocks)
	binary.LittleEndian.PutUint64(b[8:], r.LBA)
}

// Parse decodes b into r.
func (r *DSMRange) Parse(b *[DSMRangeSize]byte) {
	r.Attributes = binary.LittleEndian.Uint32(b[0:])
	r.Blocks = binary.LittleEndian.Uint32(b[4:])
	r.LBA = binary.LittleEndian.Uint64(b[8:])
}

// DSMDeallocate is the AD bit of a Dataset Management CDW11.
const DSMDeallocate = 1 << 2
