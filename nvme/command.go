package nvme

import (
	"encoding/binary"
	"strconv"
)

// CommandSize is the size of a submission queue entry.
const CommandSize = 64

// Opcode is a command's operation code. Admin and I/O commands share the
// numbers, so an Opcode's meaning depends on the queue it is sent on
// (queue 0 is the admin queue); Fabrics commands use OpFabrics on either.
type Opcode uint8

// Admin command opcodes (NVMe Base 2.0, figure 28).
const (
	OpGetLogPage        Opcode = 0x02
	OpIdentify          Opcode = 0x06
	OpSetFeatures       Opcode = 0x09
	OpGetFeatures       Opcode = 0x0A
	OpAsyncEventRequest Opcode = 0x0C
	OpKeepAlive         Opcode = 0x18
	OpFabrics           Opcode = 0x7F // also on I/O queues
)

// I/O command opcodes of the NVM command set (NVM Command Set 1.0, figure 18).
const (
	OpFlush             Opcode = 0x00
	OpWrite             Opcode = 0x01
	OpRead              Opcode = 0x02
	OpWriteZeroes       Opcode = 0x08
	OpDatasetManagement Opcode = 0x09
)

func (o Opcode) String() string { return "0x" + strconv.FormatUint(uint64(o), 16) }

// Direction is a command's data transfer direction, bits 1:0 of its
// opcode (of its FCTYPE for a Fabrics command).
type Direction uint8

// The data directions.
const (
	DirNone          Direction = 0 // no data
	DirHostToCtrl    Direction = 1 // the host sends data (a write)
	DirCtrlToHost    Direction = 2 // the controller returns data (a read)
	DirBidirectional Direction = 3
)

// FabricsType is the FCTYPE of a Fabrics command (NVMe over Fabrics 1.1,
// figure 9), byte 4 of the SQE.
type FabricsType uint8

// The Fabrics command types.
const (
	FabricsPropertySet FabricsType = 0x00
	FabricsConnect     FabricsType = 0x01
	FabricsPropertyGet FabricsType = 0x04
)

// SGLType is byte 15 of an SGL descriptor: descriptor type in bits 7:4,
// subtype in bits 3:0 (NVMe Base 2.0, figure 116).
type SGLType uint8

// The SGL descriptors NVMe/TCP uses (NVMe/TCP 1.0, 3.3.2).
const (
	// SGLDataBlockOffset is a data block with an offset address:
	// in-capsule data at Addr bytes into the capsule's data.
	SGLDataBlockOffset SGLType = 0x01
	// SGLTransportDataBlock is a transport SGL data block: the data moves
	// in separate PDUs (C2HData, or R2T and H2CData).
	SGLTransportDataBlock SGLType = 0x5A
)

// FlagSGL is the PSDT value of Command.Flags that says the data pointer is
// an SGL (bits 7:6 = 01), as every fabrics command must.
const FlagSGL uint8 = 0x40

// SGL is the first SGL descriptor of a command (SQE bytes 24-39).
type SGL struct {
	Addr   uint64
	Length uint32
	Type   SGLType
}

// Command is a submission queue entry (NVMe Base 2.0, figure 88):
//
//	byte  0      OPC: opcode
//	byte  1      FUSE (bits 1:0), PSDT (bits 7:6)
//	bytes 2-3    CID: command identifier
//	bytes 4-7    NSID (Fabrics: byte 4 is FCTYPE)
//	bytes 8-15   CDW2, CDW3
//	bytes 16-23  MPTR
//	bytes 24-39  DPTR: SGL descriptor 1 (address u64, length u32,
//	             3 reserved bytes, type u8)
//	bytes 40-63  CDW10 .. CDW15
//
// Every field is little-endian. Reserved bytes are written as zero and
// ignored when parsed.
type Command struct {
	Opcode Opcode
	Flags  uint8
	CID    uint16
	NSID   uint32
	CDW2   uint32
	CDW3   uint32
	MPTR   uint64
	SGL    SGL
	CDW10  uint32
	CDW11  uint32
	CDW12  uint32
	CDW13  uint32
	CDW14  uint32
	CDW15  uint32
}

// Put encodes c into b.
func (c *Command) Put(b *[CommandSize]byte) {
	le := binary.LittleEndian
	b[0] = byte(c.Opcode)
	b[1] = c.Flags
	le.PutUint16(b[2:], c.CID)
	le.PutUint32(b[4:], c.NSID)
	le.PutUint32(b[8:], c.CDW2)
	le.PutUint32(b[12:], c.CDW3)
	le.PutUint64(b[16:], c.MPTR)
	le.PutUint64(b[24:], c.SGL.Addr)
	le.PutUint32(b[32:], c.SGL.Length)
	b[36], b[37], b[38] = 0, 0, 0
	b[39] = byte(c.SGL.Type)
	le.PutUint32(b[40:], c.CDW10)
	le.PutUint32(b[44:], c.CDW11)
	le.PutUint32(b[48:], c.CDW12)
	le.PutUint32(b[52:], c.CDW13)
	le.PutUint32(b[56:], c.CDW14)
	le.PutUint32(b[60:], c.CDW15)
}

// Parse decodes b into c. Every 64-byte value is a Command.
func (c *Command) Parse(b *[CommandSize]byte) {
	le := binary.LittleEndian
	c.Opcode = Opcode(b[0])
	c.Flags = b[1]
	c.CID = le.Uint16(b[2:])
	c.NSID = le.Uint32(b[4:])
	c.CDW2 = le.Uint32(b[8:])
	c.CDW3 = le.Uint32(b[12:])
	c.MPTR = le.Uint64(b[16:])
	c.SGL = SGL{Addr: le.Uint64(b[24:]), Length: le.Uint32(b[32:]), Type: SGLType(b[39])}
	c.CDW10 = le.Uint32(b[40:])
	c.CDW11 = le.Uint32(b[44:])
	c.CDW12 = le.Uint32(b[48:])
	c.CDW13 = le.Uint32(b[52:])
	c.CDW14 = le.Uint32(b[56:])
	c.CDW15 = le.Uint32(b[60:])
}

// FabricsType returns the FCTYPE of a Fabrics command (byte 4).
func (c *Command) FabricsType() FabricsType { return FabricsType(c.NSID) }

// Direction returns the data direction of c: bits 1:0 of its opcode, or of
// its FCTYPE for a Fabrics command.
func (c *Command) Direction() Direction {
	if c.Opcode == OpFabrics {
		return Direction(c.FabricsType() & 3)
	}
	return Direction(c.Opcode & 3)
}

// LBA returns the starting LBA of a Read, Write or Write Zeroes (CDW10-11).
func (c *Command) LBA() uint64 { return uint64(c.CDW10) | uint64(c.CDW11)<<32 }

// Blocks returns the block count of a Read, Write or Write Zeroes: CDW12
// bits 15:0 are 0's based.
func (c *Command) Blocks() uint32 { return c.CDW12&0xFFFF + 1 }

// SetRange sets the starting LBA and the block count (at least 1, at most
// 65536) of a Read, Write or Write Zeroes, keeping CDW12's other bits.
func (c *Command) SetRange(lba uint64, blocks uint32) {
	c.CDW10, c.CDW11 = uint32(lba), uint32(lba>>32)
	c.CDW12 = c.CDW12&^0xFFFF | (blocks-1)&0xFFFF
}

// Command flags of CDW12 in Read, Write and Write Zeroes.
const (
	CDW12FUA          uint32 = 1 << 30 // force unit access
	CDW12LimitedRetry uint32 = 1 << 31
	CDW12Deallocate   uint32 = 1 << 25 // Write Zeroes: deallocate (DEAC)
)

// CompletionSize is the size of a completion queue entry.
const CompletionSize = 16

// Completion is a completion queue entry (NVMe Base 2.0, figure 89):
//
//	bytes 0-3    DW0: command specific result
//	bytes 4-7    DW1: command specific result (Property Get: high half)
//	bytes 8-9    SQHD: submission queue head pointer
//	bytes 10-11  SQID
//	bytes 12-13  CID
//	bytes 14-15  status field: P (bit 0), then the Status in bits 15:1
//
// The phase tag means nothing on a fabric: Put writes 0, Parse drops it.
type Completion struct {
	Result uint64 // DW0 in the low half, DW1 in the high half
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status Status
}

// Put encodes c into b.
func (c *Completion) Put(b *[CompletionSize]byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], c.Result)
	le.PutUint16(b[8:], c.SQHead)
	le.PutUint16(b[10:], c.SQID)
	le.PutUint16(b[12:], c.CID)
	le.PutUint16(b[14:], uint16(c.Status)<<1)
}

// Parse decodes b into c. Every 16-byte value is a Completion.
func (c *Completion) Parse(b *[CompletionSize]byte) {
	le := binary.LittleEndian
	c.Result = le.Uint64(b[0:])
	c.SQHead = le.Uint16(b[8:])
	c.SQID = le.Uint16(b[10:])
	c.CID = le.Uint16(b[12:])
	c.Status = Status(le.Uint16(b[14:]) >> 1)
}

// Err returns c's status as an error, or nil on success.
func (c *Completion) Err() error {
	if c.Status.Success() {
		return nil
	}
	return c.Status
}
