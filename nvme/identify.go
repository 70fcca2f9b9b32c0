package nvme

import (
	"encoding/binary"
	"strings"
)

// IdentifySize is the size of every Identify data structure.
const IdentifySize = 4096

// Controller or Namespace Structure (CNS) values of Identify, CDW10 bits 7:0.
const (
	CNSNamespace            = 0x00
	CNSController           = 0x01
	CNSActiveNamespaces     = 0x02
	CNSNamespaceDescriptors = 0x03
	CNSIOCommandSetCtrl     = 0x06 // I/O command set specific controller
)

// Controller types (IdentifyController.ControllerType).
const (
	ControllerIO        = 1
	ControllerDiscovery = 2
)

// ONCS bits: optional NVM commands a controller supports.
const (
	ONCSDatasetManagement = 1 << 2
	ONCSWriteZeroes       = 1 << 3
)

// SGLS bits.
const (
	SGLSSupported       = 1 << 0  // SGLs supported, no alignment needed
	SGLSOffsetInCapsule = 1 << 20 // data block descriptors with an offset address
)

// IdentifyController is the Identify Controller data structure (CNS 1,
// NVMe Base 2.0, figure 275), the fields a fabrics controller fills:
//
//	0     VID u16          4   SN (20 ASCII)    24  MN (40 ASCII)
//	64    FR (8 ASCII)     77  MDTS u8          78  CNTLID u16
//	80    VER u32          92  OAES u32         96  CTRATT u32
//	111   CNTRLTYPE u8     259 AERL u8          260 FRMW u8
//	261   LPA u8           262 ELPE u8          320 KAS u16
//	512   SQES u8          513 CQES u8          514 MAXCMD u16
//	516   NN u32           520 ONCS u16         525 VWC u8
//	528   AWUPF u16        536 SGLS u32         768 SUBNQN (256, NUL ended)
//	1792  IOCCSZ u32       1796 IORCSZ u32      1800 ICDOFF u16
//	1802  FCATT u8         1803 MSDBD u8
//
// Strings are ASCII, space padded (SUBNQN: NUL padded); Parse trims the
// padding. Every other byte is written as zero.
type IdentifyController struct {
	VendorID       uint16
	Serial         string
	Model          string
	Firmware       string
	MDTS           uint8 // max transfer 2^MDTS * 4 KiB; 0 unlimited
	ControllerID   uint16
	Version        uint32
	OAES           uint32
	CTRATT         uint32
	ControllerType uint8
	AERL           uint8 // 0's based
	FRMW           uint8
	LPA            uint8
	ELPE           uint8  // 0's based
	KAS            uint16 // keep alive granularity, 100 ms units
	SQES           uint8
	CQES           uint8
	MaxCmd         uint16
	NN             uint32
	ONCS           uint16
	VWC            uint8
	AWUPF          uint16
	SGLS           uint32
	SubNQN         string
	IOCCSZ         uint32 // I/O queue command capsule size, 16-byte units
	IORCSZ         uint32
	ICDOFF         uint16
	FCATT          uint8
	MSDBD          uint8
}

// Put encodes id into b, zeroing the rest of b.
func (id *IdentifyController) Put(b *[IdentifySize]byte) {
	le := binary.LittleEndian
	clear(b[:])
	le.PutUint16(b[0:], id.VendorID)
	putPadded(b[4:24], id.Serial, ' ')
	putPadded(b[24:64], id.Model, ' ')
	putPadded(b[64:72], id.Firmware, ' ')
	b[77] = id.MDTS
	le.PutUint16(b[78:], id.ControllerID)
	le.PutUint32(b[80:], id.Version)
	le.PutUint32(b[92:], id.OAES)
	le.PutUint32(b[96:], id.CTRATT)
	b[111] = id.ControllerType
	b[259], b[260], b[261], b[262] = id.AERL, id.FRMW, id.LPA, id.ELPE
	le.PutUint16(b[320:], id.KAS)
	b[512], b[513] = id.SQES, id.CQES
	le.PutUint16(b[514:], id.MaxCmd)
	le.PutUint32(b[516:], id.NN)
	le.PutUint16(b[520:], id.ONCS)
	b[525] = id.VWC
	le.PutUint16(b[528:], id.AWUPF)
	le.PutUint32(b[536:], id.SGLS)
	putPadded(b[768:1024], id.SubNQN, 0)
	le.PutUint32(b[1792:], id.IOCCSZ)
	le.PutUint32(b[1796:], id.IORCSZ)
	le.PutUint16(b[1800:], id.ICDOFF)
	b[1802], b[1803] = id.FCATT, id.MSDBD
}

// Parse decodes b into id.
func (id *IdentifyController) Parse(b *[IdentifySize]byte) {
	le := binary.LittleEndian
	*id = IdentifyController{
		VendorID: le.Uint16(b[0:]), Serial: trimPadded(b[4:24]), Model: trimPadded(b[24:64]),
		Firmware: trimPadded(b[64:72]), MDTS: b[77], ControllerID: le.Uint16(b[78:]),
		Version: le.Uint32(b[80:]), OAES: le.Uint32(b[92:]), CTRATT: le.Uint32(b[96:]),
		ControllerType: b[111], AERL: b[259], FRMW: b[260], LPA: b[261], ELPE: b[262],
		KAS: le.Uint16(b[320:]), SQES: b[512], CQES: b[513], MaxCmd: le.Uint16(b[514:]),
		NN: le.Uint32(b[516:]), ONCS: le.Uint16(b[520:]), VWC: b[525], AWUPF: le.Uint16(b[528:]),
		SGLS: le.Uint32(b[536:]), SubNQN: trimNUL(b[768:1024]), IOCCSZ: le.Uint32(b[1792:]),
		IORCSZ: le.Uint32(b[1796:]), ICDOFF: le.Uint16(b[1800:]), FCATT: b[1802], MSDBD: b[1803],
	}
}

// LBAFormat is one LBA format of a namespace.
type LBAFormat struct {
	MetadataSize uint16
	LBADS        uint8 // log2 of the block size
	RP           uint8 // relative performance, bits 1:0
}

// IdentifyNamespace is the Identify Namespace data structure of the NVM
// command set (CNS 0, NVM Command Set 1.0, figure 97):
//
//	0   NSZE u64    8   NCAP u64    16  NUSE u64     24  NSFEAT u8
//	25  NLBAF u8    26  FLBAS u8    30  NMIC u8      33  DLFEAT u8
//	99  NSATTR u8   104 NGUID (16)  120 EUI64 (8)
//	128 + 4n        LBAF[n]: MS u16, LBADS u8, RP u8 (bits 1:0); n < 16
type IdentifyNamespace struct {
	Size        uint64 // NSZE, blocks
	Capacity    uint64 // NCAP
	Utilization uint64 // NUSE
	Features    uint8  // NSFEAT
	NLBAF       uint8  // 0's based count of LBAF
	FLBAS       uint8  // bits 3:0: index of the format in use
	NMIC        uint8
	DLFEAT      uint8
	Attributes  uint8 // NSATTR bit 0: write protected
	NGUID       [16]byte
	EUI64       [8]byte
	LBAF        [16]LBAFormat
}

// Put encodes ns into b, zeroing the rest of b.
func (ns *IdentifyNamespace) Put(b *[IdentifySize]byte) {
	le := binary.LittleEndian
	clear(b[:])
	le.PutUint64(b[0:], ns.Size)
	le.PutUint64(b[8:], ns.Capacity)
	le.PutUint64(b[16:], ns.Utilization)
	b[24], b[25], b[26], b[30], b[33], b[99] = ns.Features, ns.NLBAF, ns.FLBAS, ns.NMIC, ns.DLFEAT, ns.Attributes
	copy(b[104:120], ns.NGUID[:])
	copy(b[120:128], ns.EUI64[:])
	for i, f := range ns.LBAF {
		o := 128 + 4*i
		le.PutUint16(b[o:], f.MetadataSize)
		b[o+2], b[o+3] = f.LBADS, f.RP&3
	}
}

// Parse decodes b into ns.
func (ns *IdentifyNamespace) Parse(b *[IdentifySize]byte) {
	le := binary.LittleEndian
	*ns = IdentifyNamespace{
		Size: le.Uint64(b[0:]), Capacity: le.Uint64(b[8:]), Utilization: le.Uint64(b[16:]),
		Features: b[24], NLBAF: b[25], FLBAS: b[26], NMIC: b[30], DLFEAT: b[33], Attributes: b[99],
	}
	copy(ns.NGUID[:], b[104:120])
	copy(ns.EUI64[:], b[120:128])
	for i := range ns.LBAF {
		o := 128 + 4*i
		ns.LBAF[i] = LBAFormat{MetadataSize: le.Uint16(b[o:]), LBADS: b[o+2], RP: b[o+3] & 3}
	}
}

// BlockSize returns the block size of the format in use, or 0 if its LBADS
// is outside 9..16.
func (ns *IdentifyNamespace) BlockSize() int {
	d := ns.LBAF[ns.FLBAS&0xF].LBADS
	if d < 9 || d > 16 {
		return 0
	}
	return 1 << d
}

// PutNamespaceList encodes the Active Namespace ID list (CNS 2): the ids,
// ascending, at most 1024, then zeroes.
func PutNamespaceList(b *[IdentifySize]byte, ids []uint32) {
	clear(b[:])
	for i, id := range ids[:min(len(ids), IdentifySize/4)] {
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
}

// ParseNamespaceList appends to dst the ids of an Active Namespace ID list,
// up to the first zero.
func ParseNamespaceList(b *[IdentifySize]byte, dst []uint32) []uint32 {
	for i := 0; i < IdentifySize; i += 4 {
		id := binary.LittleEndian.Uint32(b[i:])
		if id == 0 {
			break
		}
		dst = append(dst, id)
	}
	return dst
}

// Namespace identification descriptor types (CNS 3, NVMe Base 2.0, figure 279).
const (
	NIDTEUI64 = 1
	NIDTNGUID = 2
	NIDTUUID  = 3
	NIDTCSI   = 4
)

// NamespaceDescriptor is one namespace identification descriptor.
type NamespaceDescriptor struct {
	Type  uint8
	Value []byte
}

// PutNamespaceDescriptors encodes descriptors ({NIDT, NIDL, 2 reserved,
// value}) into b, zeroing the rest; those that do not fit are left out.
// The zeroed rest ends the list (a descriptor of length 0), unless the
// list fills b to its end, which ends it as well (as
// ParseNamespaceDescriptors reads it).
func PutNamespaceDescriptors(b *[IdentifySize]byte, ds []NamespaceDescriptor) {
	clear(b[:])
	o := 0
	for _, d := range ds {
		if len(d.Value) == 0 || len(d.Value) > 255 || o+4+len(d.Value) > IdentifySize {
			continue
		}
		b[o], b[o+1] = d.Type, byte(len(d.Value))
		copy(b[o+4:], d.Value)
		o += 4 + len(d.Value)
	}
}

// ParseNamespaceDescriptors returns the descriptors of b, up to the first
// of length 0. The values are slices of b.
func ParseNamespaceDescriptors(b *[IdentifySize]byte) []NamespaceDescriptor {
	var ds []NamespaceDescriptor
	for o := 0; o+4 <= IdentifySize; {
		n := int(b[o+1])
		if n == 0 || o+4+n > IdentifySize {
			break
		}
		ds = append(ds, NamespaceDescriptor{Type: b[o], Value: b[o+4 : o+4+n]})
		o += 4 + n
	}
	return ds
}

func putPadded(dst []byte, s string, pad byte) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = pad
	}
	if pad == 0 && n == len(dst) {
		dst[len(dst)-1] = 0 // keep the NUL terminator
	}
}

func trimPadded(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " ")
}

// trimNUL reads a NUL-terminated field: its last byte is the terminator
// whatever it holds, as putPadded writes it.
func trimNUL(b []byte) string { return trimPadded(b[:len(b)-1]) }
