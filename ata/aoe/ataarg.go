package aoe

import "fmt"

// ATAFlags are the flags of an ATA argument (AoEr11 3.1).
type ATAFlags uint8

const (
	// ATAWrite (W): data follows the argument.
	ATAWrite ATAFlags = 0x01
	// ATAAsync (A): asynchronous write; Linux never sets it.
	ATAAsync ATAFlags = 0x02
	// ATADevice (D): device/head register flag; Linux never sets it.
	ATADevice ATAFlags = 0x10
	// ATAExtended (E): LBA48 command, six LBA bytes meaningful. Linux sets
	// it with every EXT opcode; Target ignores it and takes the LBA layout
	// from the opcode, as vblade does.
	ATAExtended ATAFlags = 0x40
)

// Has reports whether every flag of g is set in f.
func (f ATAFlags) Has(g ATAFlags) bool { return f&g == g }

func (f ATAFlags) String() string {
	s := ""
	for _, x := range []struct {
		f ATAFlags
		n string
	}{{ATAExtended, "E"}, {ATADevice, "D"}, {ATAAsync, "A"}, {ATAWrite, "W"}} {
		if f.Has(x.f) {
			s += x.n
		}
	}
	if rest := f &^ (ATAExtended | ATADevice | ATAAsync | ATAWrite); rest != 0 {
		s += fmt.Sprintf("|%#x", uint8(rest))
	}
	if s == "" {
		return "0"
	}
	return s
}

// ATAArg is the argument of an ATA command frame (AoEr11 3.1), 12 bytes
// at offset 24:
//
//	24 aflags | 25 err/feature | 26 sector count | 27 cmd/status |
//	28..33 lba0..lba5 (lba0 least significant) | 34..35 reserved
//
// In a request ErrFeature is the features register and CmdStatus the
// opcode; in a reply they are the error and status registers. LBA holds
// the six LBA bytes as they are on the wire (48 bits; for a 28-bit command
// Linux puts the device register in lba3).
type ATAArg struct {
	Flags       ATAFlags
	ErrFeature  uint8
	SectorCount uint8
	CmdStatus   uint8
	LBA         uint64
}

// ParseATAArg decodes the ATA argument of frame (after the header).
func ParseATAArg(frame []byte, a *ATAArg) error {
	if len(frame) < ATADataOffset {
		return ErrShort
	}
	b := frame[HeaderSize:ATADataOffset]
	a.Flags, a.ErrFeature, a.SectorCount, a.CmdStatus = ATAFlags(b[0]), b[1], b[2], b[3]
	a.LBA = 0
	for i := 5; i >= 0; i-- {
		a.LBA = a.LBA<<8 | uint64(b[4+i])
	}
	return nil
}

// Put encodes a at offset 24 of frame, which must hold ATADataOffset
// bytes; the reserved bytes are zeroed and LBA bits above 47 dropped.
func (a *ATAArg) Put(frame []byte) {
	b := frame[HeaderSize:ATADataOffset]
	b[0], b[1], b[2], b[3] = uint8(a.Flags), a.ErrFeature, a.SectorCount, a.CmdStatus
	for i := range 6 {
		b[4+i] = uint8(a.LBA >> (8 * i))
	}
	b[10], b[11] = 0, 0
}
