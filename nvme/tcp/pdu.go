package tcp

import (
	"encoding/binary"
	"strconv"

	"github.com/nhdkit/nhd/nvme"
)

// PDUType is byte 0 of every PDU (NVMe/TCP 1.0, figure 21).
type PDUType uint8

// The PDU types.
const (
	TypeICReq       PDUType = 0x00
	TypeICResp      PDUType = 0x01
	TypeH2CTermReq  PDUType = 0x02
	TypeC2HTermReq  PDUType = 0x03
	TypeCapsuleCmd  PDUType = 0x04
	TypeCapsuleResp PDUType = 0x05
	TypeH2CData     PDUType = 0x06
	TypeC2HData     PDUType = 0x07
	TypeR2T         PDUType = 0x09
)

var typeNames = [...]string{"ICReq", "ICResp", "H2CTermReq", "C2HTermReq", "CapsuleCmd", "CapsuleResp", "H2CData", "C2HData", "type 8", "R2T"}

func (t PDUType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "type 0x" + strconv.FormatUint(uint64(t), 16)
}

// hlen returns the header length a PDU of type t must have, 0 for an
// unknown type.
func (t PDUType) hlen() int {
	switch t {
	case TypeICReq, TypeICResp:
		return ICSize
	case TypeCapsuleCmd:
		return CmdSize
	case TypeH2CTermReq, TypeC2HTermReq, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T:
		return HeaderSize
	}
	return 0
}

// Flags is byte 1 of every PDU.
type Flags uint8

// The PDU flags.
const (
	FlagHDGST   Flags = 1 << 0 // a header digest follows the header
	FlagDDGST   Flags = 1 << 1 // a data digest follows the data
	FlagLast    Flags = 1 << 2 // last data PDU of a transfer
	FlagSuccess Flags = 1 << 3 // C2HData: the command succeeded, no CapsuleResp follows
)

// Has reports whether every bit of g is set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

// Header sizes: the common header, the 24-byte headers (CapsuleResp,
// H2CData, C2HData, R2T, TermReq), the CapsuleCmd header and ICReq/ICResp.
const (
	CommonSize = 8
	HeaderSize = 24
	CmdSize    = 72
	ICSize     = 128
	DigestSize = 4
)

// MaxTermData is the most of a bad PDU's header a TermReq carries.
const MaxTermData = 128

// Header is the common header that opens every PDU (NVMe/TCP 1.0, figure
// 20):
//
//	byte 0     PDU-Type
//	byte 1     FLAGS
//	byte 2     HLEN: header length, without the header digest
//	byte 3     PDO: PDU data offset from the start of the PDU (0: no data)
//	bytes 4-7  PLEN: length of the whole PDU, digests and padding included
type Header struct {
	Type  PDUType
	Flags Flags
	HLen  uint8
	PDO   uint8
	PLen  uint32
}

// Put encodes h into b.
func (h *Header) Put(b *[CommonSize]byte) {
	b[0], b[1], b[2], b[3] = byte(h.Type), byte(h.Flags), h.HLen, h.PDO
	binary.LittleEndian.PutUint32(b[4:], h.PLen)
}

// Parse decodes b into h. Every 8-byte value is a Header; see Check.
func (h *Header) Parse(b *[CommonSize]byte) {
	*h = Header{Type: PDUType(b[0]), Flags: Flags(b[1]), HLen: b[2], PDO: b[3], PLen: binary.LittleEndian.Uint32(b[4:])}
}

// put writes h into the first 8 bytes of b with the given type and hlen.
func (h *Header) put(b []byte, t PDUType, hlen int) {
	h.Type, h.HLen = t, uint8(hlen)
	h.Put((*[CommonSize]byte)(b))
}

// Digest flags of ICReq and ICResp.
const (
	DigestHeader = 1 << 0
	DigestData   = 1 << 1
)

// ICReq is the Initialize Connection Request (NVMe/TCP 1.0, figure 26):
//
//	bytes 0-7    common header: type 0, HLEN 128, PDO 0, PLEN 128
//	bytes 8-9    PFV: PDU format version (0)
//	byte  10     HPDA: host PDU data alignment, 0's based dwords
//	byte  11     DGST: bit 0 header digest, bit 1 data digest
//	bytes 12-15  MAXR2T: most outstanding R2Ts per command, 0's based
//	bytes 16-127 reserved
type ICReq struct {
	PFV    uint16
	HPDA   uint8
	Digest uint8
	MaxR2T uint32
}

// Put encodes r into b, common header included.
func (r *ICReq) Put(b *[ICSize]byte) {
	clear(b[:])
	(&Header{PLen: ICSize}).put(b[:], TypeICReq, ICSize)
	binary.LittleEndian.PutUint16(b[8:], r.PFV)
	b[10], b[11] = r.HPDA, r.Digest
	binary.LittleEndian.PutUint32(b[12:], r.MaxR2T)
}

// Parse decodes b into r. It fails with a *FatalError if the common header
// is not that of an ICReq.
func (r *ICReq) Parse(b *[ICSize]byte) error {
	if err := checkIC(b, TypeICReq); err != nil {
		return err
	}
	*r = ICReq{PFV: binary.LittleEndian.Uint16(b[8:]), HPDA: b[10], Digest: b[11], MaxR2T: binary.LittleEndian.Uint32(b[12:])}
	return nil
}

// ICResp is the Initialize Connection Response (NVMe/TCP 1.0, figure 27):
//
//	bytes 0-7    common header: type 1, HLEN 128, PDO 0, PLEN 128
//	bytes 8-9    PFV
//	byte  10     CPDA: controller PDU data alignment, 0's based dwords
//	byte  11     DGST: digests enabled
//	bytes 12-15  MAXH2CDATA: most data bytes in one H2CData PDU
//	bytes 16-127 reserved
type ICResp struct {
	PFV        uint16
	CPDA       uint8
	Digest     uint8
	MaxH2CData uint32
}

// Put encodes r into b, common header included.
func (r *ICResp) Put(b *[ICSize]byte) {
	clear(b[:])
	(&Header{PLen: ICSize}).put(b[:], TypeICResp, ICSize)
	binary.LittleEndian.PutUint16(b[8:], r.PFV)
	b[10], b[11] = r.CPDA, r.Digest
	binary.LittleEndian.PutUint32(b[12:], r.MaxH2CData)
}

// Parse decodes b into r. It fails with a *FatalError if the common header
// is not that of an ICResp.
func (r *ICResp) Parse(b *[ICSize]byte) error {
	if err := checkIC(b, TypeICResp); err != nil {
		return err
	}
	*r = ICResp{PFV: binary.LittleEndian.Uint16(b[8:]), CPDA: b[10], Digest: b[11], MaxH2CData: binary.LittleEndian.Uint32(b[12:])}
	return nil
}

func checkIC(b *[ICSize]byte, t PDUType) error {
	var h Header
	h.Parse((*[CommonSize]byte)(b[:CommonSize]))
	switch {
	case h.Type != t:
		return fatal(FESInvalidField, 0, "expected "+t.String()+", got "+h.Type.String())
	case h.HLen != ICSize:
		return fatal(FESInvalidField, 2, "bad "+t.String()+" HLEN")
	case h.PDO != 0:
		return fatal(FESInvalidField, 3, "bad "+t.String()+" PDO")
	case h.PLen != ICSize:
		return fatal(FESInvalidField, 4, "bad "+t.String()+" PLEN")
	}
	return nil
}

// CapsuleCmd is the header of a Command Capsule PDU (NVMe/TCP 1.0, figure
// 28): the common header (type 4, HLEN 72), then the 64-byte SQE; in-capsule
// data, if any, starts at PDO.
type CapsuleCmd struct {
	Header
	Cmd nvme.Command
}

// Put encodes p into b (Type and HLen are set).
func (p *CapsuleCmd) Put(b *[CmdSize]byte) {
	p.put(b[:], TypeCapsuleCmd, CmdSize)
	p.Cmd.Put((*[nvme.CommandSize]byte)(b[CommonSize:]))
}

// Parse decodes b into p; it fails with a *FatalError on a wrong type or
// HLEN.
func (p *CapsuleCmd) Parse(b *[CmdSize]byte) error {
	p.Header.Parse((*[CommonSize]byte)(b[:CommonSize]))
	if err := p.check(TypeCapsuleCmd); err != nil {
		return err
	}
	p.Cmd.Parse((*[nvme.CommandSize]byte)(b[CommonSize:]))
	return nil
}

// check validates the type and HLEN of h against t.
func (h *Header) check(t PDUType) error {
	if h.Type != t {
		return fatal(FESInvalidField, 0, "expected "+t.String()+", got "+h.Type.String())
	}
	if int(h.HLen) != t.hlen() {
		return fatal(FESInvalidField, 2, "bad "+t.String()+" HLEN "+strconv.Itoa(int(h.HLen)))
	}
	return nil
}

// CapsuleResp is a Response Capsule PDU (NVMe/TCP 1.0, figure 29): the
// common header (type 5, HLEN 24), then the 16-byte CQE.
type CapsuleResp struct {
	Header
	Cpl nvme.Completion
}

// Put encodes p into b (Type and HLen are set).
func (p *CapsuleResp) Put(b *[HeaderSize]byte) {
	p.put(b[:], TypeCapsuleResp, HeaderSize)
	p.Cpl.Put((*[nvme.CompletionSize]byte)(b[CommonSize:]))
}

// Parse decodes b into p; it fails with a *FatalError on a wrong type or
// HLEN.
func (p *CapsuleResp) Parse(b *[HeaderSize]byte) error {
	p.Header.Parse((*[CommonSize]byte)(b[:CommonSize]))
	if err := p.check(TypeCapsuleResp); err != nil {
		return err
	}
	p.Cpl.Parse((*[nvme.CompletionSize]byte)(b[CommonSize:]))
	return nil
}

// Data is the header of an H2CData or C2HData PDU (NVMe/TCP 1.0, figures
// 30 and 31):
//
//	bytes 0-7    common header: type 6 or 7, HLEN 24
//	bytes 8-9    CCCID: the command's CID
//	bytes 10-11  TTAG: transfer tag of the R2T (H2CData; reserved in C2HData)
//	bytes 12-15  DATAO: offset of this PDU's data in the command's data
//	bytes 16-19  DATAL: length of this PDU's data
//	bytes 20-23  reserved
type Data struct {
	Header
	CCCID uint16
	TTag  uint16
	DataO uint32
	DataL uint32
}

// Put encodes p into b with p.Type (TypeH2CData or TypeC2HData).
func (p *Data) Put(b *[HeaderSize]byte) {
	p.put(b[:], p.Type, HeaderSize)
	le := binary.LittleEndian
	le.PutUint16(b[8:], p.CCCID)
	le.PutUint16(b[10:], p.TTag)
	le.PutUint32(b[12:], p.DataO)
	le.PutUint32(b[16:], p.DataL)
	clear(b[20:24])
}

// Parse decodes b into p; it fails with a *FatalError unless b is an
// H2CData or C2HData header with HLEN 24.
func (p *Data) Parse(b *[HeaderSize]byte) error {
	p.Header.Parse((*[CommonSize]byte)(b[:CommonSize]))
	t := p.Type
	if t != TypeC2HData {
		t = TypeH2CData
	}
	if err := p.check(t); err != nil {
		return err
	}
	le := binary.LittleEndian
	p.CCCID, p.TTag, p.DataO, p.DataL = le.Uint16(b[8:]), le.Uint16(b[10:]), le.Uint32(b[12:]), le.Uint32(b[16:])
	return nil
}

// R2T is a Ready to Transfer PDU (NVMe/TCP 1.0, figure 32):
//
//	bytes 0-7    common header: type 9, HLEN 24, PLEN 24 (+ digest)
//	bytes 8-9    CCCID
//	bytes 10-11  TTAG: transfer tag the H2CData PDUs echo
//	bytes 12-15  R2TO: offset of the data asked for
//	bytes 16-19  R2TL: length of the data asked for
//	bytes 20-23  reserved
type R2T struct {
	Header
	CCCID uint16
	TTag  uint16
	R2TO  uint32
	R2TL  uint32
}

// Put encodes p into b (Type and HLen are set).
func (p *R2T) Put(b *[HeaderSize]byte) {
	d := Data{Header: p.Header, CCCID: p.CCCID, TTag: p.TTag, DataO: p.R2TO, DataL: p.R2TL}
	d.Type = TypeR2T
	d.Put(b)
	p.Type, p.HLen = TypeR2T, HeaderSize
}

// Parse decodes b into p; it fails with a *FatalError on a wrong type or
// HLEN.
func (p *R2T) Parse(b *[HeaderSize]byte) error {
	p.Header.Parse((*[CommonSize]byte)(b[:CommonSize]))
	if err := p.check(TypeR2T); err != nil {
		return err
	}
	le := binary.LittleEndian
	p.CCCID, p.TTag, p.R2TO, p.R2TL = le.Uint16(b[8:]), le.Uint16(b[10:]), le.Uint32(b[12:]), le.Uint32(b[16:])
	return nil
}

// TermReq is the header of an H2CTermReq or C2HTermReq PDU (NVMe/TCP 1.0,
// figures 33 and 34), followed by up to 128 bytes of the header of the PDU
// in error:
//
//	bytes 0-7    common header: type 2 or 3, HLEN 24, PDO 24 if data
//	bytes 8-9    FES: fatal error status
//	bytes 10-13  FEI: fatal error information (a byte offset or a value)
//	bytes 14-23  reserved
type TermReq struct {
	Header
	FES FES
	FEI uint32
}

// Put encodes p into b with p.Type (TypeH2CTermReq or TypeC2HTermReq).
func (p *TermReq) Put(b *[HeaderSize]byte) {
	p.put(b[:], p.Type, HeaderSize)
	clear(b[8:])
	binary.LittleEndian.PutUint16(b[8:], uint16(p.FES))
	binary.LittleEndian.PutUint32(b[10:], p.FEI)
}

// Parse decodes b into p; it fails with a *FatalError unless b is a
// TermReq header with HLEN 24.
func (p *TermReq) Parse(b *[HeaderSize]byte) error {
	p.Header.Parse((*[CommonSize]byte)(b[:CommonSize]))
	t := p.Type
	if t != TypeC2HTermReq {
		t = TypeH2CTermReq
	}
	if err := p.check(t); err != nil {
		return err
	}
	p.FES, p.FEI = FES(binary.LittleEndian.Uint16(b[8:])), binary.LittleEndian.Uint32(b[10:])
	return nil
}
