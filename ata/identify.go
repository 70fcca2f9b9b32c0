package ata

import (
	"encoding/binary"
	"io"
	"math/bits"
	"strings"
)

// IdentifySize is the length of IDENTIFY DEVICE data on the wire.
const IdentifySize = 512

// Identify is IDENTIFY DEVICE data (ACS-3 §7.12.7) as 256 words. On the
// wire (the data register, Bytes) each word is little-endian; ATA strings
// keep their first character in the high byte of each word.
type Identify [256]uint16

// IDENTIFY DEVICE word numbers the package fills (ACS-3 Table 45; the
// meanings smartmontools ataidentify.cpp prints).
const (
	IDConfig          = 0   // bit 15 = 0: ATA device; 0040h
	IDCylinders       = 1   // default cylinders (obsolete)
	IDSpecificConfig  = 2   // C837h: IDENTIFY complete, no spin-up SET FEATURES
	IDHeads           = 3   // default heads (obsolete)
	IDSectorsPerTrack = 6   // default sectors per track (obsolete)
	IDSerial          = 10  // words 10-19: serial number, 20 ASCII characters
	IDFirmware        = 23  // words 23-26: firmware revision, 8 characters
	IDModel           = 27  // words 27-46: model number, 40 characters
	IDMaxMultiple     = 47  // 8000h | max sectors per DRQ block
	IDCapabilities    = 49  // bit 11 IORDY, 10 IORDY can be disabled, 9 LBA, 8 DMA
	IDCapabilities2   = 50  // 4000h
	IDPIOTiming       = 51  // obsolete PIO mode in bits 15:8
	IDFieldValid      = 53  // bit 0 words 54-58, bit 1 words 64-70, bit 2 word 88
	IDCurCylinders    = 54  // current CHS translation
	IDCurHeads        = 55  //
	IDCurSectors      = 56  //
	IDCurCapacity     = 57  // words 57-58: current CHS capacity
	IDMultiple        = 59  // bit 8 valid | current multiple count
	IDLBA28Capacity   = 60  // words 60-61: LBA28 capacity, clamped to 0FFFFFFFh
	IDSWDMA           = 62  // single-word DMA: supported 2:0, selected 10:8 (obsolete)
	IDMWDMA           = 63  // multiword DMA: supported 2:0, selected 10:8
	IDPIOModes        = 64  // bit 0 PIO3, bit 1 PIO4
	IDMWDMACycleMin   = 65  // ns
	IDMWDMACycleRec   = 66  // ns
	IDPIOCycleMin     = 67  // ns, without IORDY
	IDPIOCycleIORDY   = 68  // ns, with IORDY
	IDAddSupported    = 69  // bit 14 deterministic read after TRIM, bit 5 zeroes after TRIM
	IDMajorVersion    = 80  // bitmap of ATA/ACS versions
	IDMinorVersion    = 81  //
	IDCmdSet1         = 82  // supported: bit 14 NOP, 5 write cache, 3 power management, 0 SMART
	IDCmdSet2         = 83  // supported: 15:14 = 01b, 13 FLUSH EXT, 12 FLUSH, 10 LBA48
	IDCmdSetExt       = 84  // supported: 15:14 = 01b, 8 WWN, 6 FUA
	IDCmdEnabled1     = 85  // enabled, as word 82
	IDCmdEnabled2     = 86  // enabled, as word 83 (bits 15:14 reserved)
	IDCmdEnabledExt   = 87  // enabled, as word 84
	IDUDMA            = 88  // Ultra DMA: supported 6:0, selected 14:8
	IDHWReset         = 93  // 15:13 = 011b: 80-conductor cable; bit 0 device 0
	IDLBA48Capacity   = 100 // words 100-103: LBA48 capacity
	IDMaxDSMBlocks    = 105 // max 512-byte blocks of DSM range entries
	IDWWN             = 108 // words 108-111: World Wide Name, word 108 first (NAA in 15:12)
	IDSectorSize      = 106 // 15:14 = 01b, 13 multiple logical per physical, 12 logical > 256 words, 3:0 log2 ratio
	IDLogicalSize     = 117 // words 117-118: logical sector size in words
	IDDSM             = 169 // bit 0: DATA SET MANAGEMENT TRIM supported
	IDRotationRate    = 217 // 0 not reported, 1 non-rotating, else rpm
	IDIntegrity       = 255 // bits 7:0 A5h, bits 15:8 checksum
)

// IntegritySignature is the low byte of word 255 that says the high byte is
// a checksum.
const IntegritySignature = 0xA5

// NonRotating is the DeviceInfo.RotationRate of a solid-state device.
const NonRotating = 1

// DeviceInfo describes the device IDENTIFY DEVICE reports. The zero value of
// each optional field picks the default written beside it.
type DeviceInfo struct {
	Model    string // up to 40 printable ASCII characters
	Serial   string // up to 20
	Firmware string // up to 8
	// Sectors is the capacity in logical sectors, 1 to 2^48.
	Sectors uint64

	// LogicalSectorSize is the data of one LBA in bytes: a multiple of 512,
	// 0 means 512.
	LogicalSectorSize int
	// PhysicalSectorSize is LogicalSectorSize times a power of two up to
	// 2^15; 0 means equal to the logical size.
	PhysicalSectorSize int
	// RotationRate is word 217: 0 not reported, NonRotating for an SSD,
	// else revolutions per minute (0401h-FFFEh).
	RotationRate uint16
	// TRIM advertises DATA SET MANAGEMENT TRIM (word 169 bit 0). The device
	// needs a backend with a Trim method and a DMA engine to honour it.
	TRIM bool
	// TrimZeroes says trimmed sectors read back as zeroes (the backend
	// guarantees it, as nbd.MemDisk does): with TRIM, word 69 bits 14
	// (deterministic read after TRIM) and 5 (zeroes after TRIM).
	TrimZeroes bool
	// WWN is the World Wide Name of words 108-111 (word 84/87 bit 8); 0
	// means none. Its top nibble is the NAA and must be 5 (IEEE
	// registered), as ACS-3 requires.
	WWN uint64
	// WriteCache says the device has a volatile write cache (word 82 bit 5);
	// it is enabled at power-on and switched by SET FEATURES 02h/82h. With
	// it disabled every write is flushed before it completes.
	WriteCache bool
	// MaxMultiple is the largest DRQ block of READ/WRITE MULTIPLE in
	// sectors, a power of two up to 128; 0 means 16. It is also the
	// power-on multiple count.
	MaxMultiple uint8
	// SWDMAModes, MWDMAModes and UDMAModes are bitmasks of supported DMA
	// modes (single-word 0-2, multiword 0-2, Ultra 0-6). When MWDMAModes
	// and UDMAModes are both 0 they default to 07h and 7Fh. The highest
	// UDMA mode (else MWDMA) is selected at power-on.
	SWDMAModes, MWDMAModes, UDMAModes uint8
	// NoDMA says the device does no DMA: word 49 bit 8 and words 62, 63
	// and 88 are clear. A Device without a DMA engine reports NoDMA.
	NoDMA bool
}

func (info *DeviceInfo) logical() int {
	if info.LogicalSectorSize == 0 {
		return 512
	}
	return info.LogicalSectorSize
}

func (info *DeviceInfo) physical() int {
	if info.PhysicalSectorSize == 0 {
		return info.logical()
	}
	return info.PhysicalSectorSize
}

func (info *DeviceInfo) maxMultiple() uint8 {
	if info.MaxMultiple == 0 {
		return 16
	}
	return info.MaxMultiple
}

func (info *DeviceInfo) dmaModes() (sw, mw, udma uint8) {
	if info.NoDMA {
		return 0, 0, 0
	}
	if info.MWDMAModes == 0 && info.UDMAModes == 0 {
		return info.SWDMAModes & 7, 0x07, 0x7F
	}
	return info.SWDMAModes & 7, info.MWDMAModes & 7, info.UDMAModes & 0x7F
}

// defaultDMAMode returns the SET FEATURES transfer-mode code selected at
// power-on: the highest UDMA, else MWDMA, else SWDMA mode; 0 for none.
func (info *DeviceInfo) defaultDMAMode() uint8 {
	sw, mw, udma := info.dmaModes()
	switch {
	case udma != 0:
		return XferUDMA0 + uint8(bits.Len8(udma)) - 1
	case mw != 0:
		return XferMWDMA0 + uint8(bits.Len8(mw)) - 1
	case sw != 0:
		return XferSWDMA0 + uint8(bits.Len8(sw)) - 1
	}
	return 0
}

// Validate reports whether info can be represented exactly in IDENTIFY
// DEVICE data; the error wraps ErrInfo and names the field. Identify
// truncates and replaces what Validate rejects.
func (info *DeviceInfo) Validate() error {
	bad := func(what string) error { return &infoError{what} }
	for _, f := range [...]struct {
		name string
		s    string
		n    int
	}{{"Model", info.Model, 40}, {"Serial", info.Serial, 20}, {"Firmware", info.Firmware, 8}} {
		if len(f.s) > f.n {
			return bad(f.name + " longer than its IDENTIFY field")
		}
		for i := 0; i < len(f.s); i++ {
			if f.s[i] < 0x20 || f.s[i] > 0x7E {
				return bad(f.name + " has a character outside printable ASCII")
			}
		}
	}
	if info.Sectors == 0 || info.Sectors > MaxLBA48+1 {
		return bad("Sectors must be 1 to 2^48")
	}
	l, p := info.logical(), info.physical()
	if l < 512 || l%512 != 0 {
		return bad("LogicalSectorSize must be a multiple of 512")
	}
	if p < l || p%l != 0 || bits.OnesCount(uint(p/l)) != 1 || p/l > 1<<15 {
		return bad("PhysicalSectorSize must be LogicalSectorSize times a power of two")
	}
	if r := info.RotationRate; r > 1 && (r < 0x0401 || r == 0xFFFF) {
		return bad("RotationRate must be 0, 1 or 0401h-FFFEh")
	}
	if m := info.MaxMultiple; m != 0 && (m > 128 || bits.OnesCount8(m) != 1) {
		return bad("MaxMultiple must be a power of two up to 128")
	}
	if info.SWDMAModes > 7 || info.MWDMAModes > 7 || info.UDMAModes > 0x7F {
		return bad("DMA mode masks out of range")
	}
	if info.WWN != 0 && info.WWN>>60 != 5 {
		return bad("WWN must have NAA 5 in its top nibble")
	}
	return nil
}

type infoError struct{ what string }

func (e *infoError) Error() string { return ErrInfo.Error() + ": " + e.what }
func (e *infoError) Unwrap() error { return ErrInfo }

// settings are the parts of IDENTIFY data that commands change.
type settings struct {
	writeCache bool
	multiple   uint8 // current multiple count, 0 = disabled
	dmaMode    uint8 // selected DMA transfer-mode code, 0 = none
	geom       Geometry
	smartOff   bool // SMART DISABLE OPERATIONS was the last SMART switch
}

func (info *DeviceInfo) powerOn() settings {
	return settings{
		writeCache: info.WriteCache,
		multiple:   info.maxMultiple(),
		dmaMode:    info.defaultDMAMode(),
		geom:       DefaultGeometry(info.Sectors),
	}
}

// Identify returns the IDENTIFY DEVICE data of a freshly powered-on device
// described by info, sealed with the word 255 checksum. Strings are
// truncated to their fields and non-printable characters replaced by '?';
// call Validate to be told instead.
func (info DeviceInfo) Identify() Identify {
	var id Identify
	s := info.powerOn()
	info.fill(&id, &s)
	return id
}

// fill writes the IDENTIFY data for info with settings s into id.
func (info *DeviceInfo) fill(id *Identify, s *settings) {
	*id = Identify{}
	info.fillIdentity(id, s)
	info.fillTransfer(id, s)
	info.fillFeatures(id, s)
	id.Seal()
}

// fillIdentity writes the words that say what the device is and how big:
// strings, geometry, capacities, sector sizes, the multiple count.
func (info *DeviceInfo) fillIdentity(id *Identify, s *settings) {
	def := DefaultGeometry(info.Sectors)
	id[IDConfig] = 0x0040
	id[IDCylinders] = def.Cylinders
	id[IDSpecificConfig] = 0xC837
	id[IDHeads] = uint16(def.Heads)
	id[IDSectorsPerTrack] = uint16(def.SectorsPerTrack)
	id.putString(IDSerial, 20, info.Serial)
	id.putString(IDFirmware, 8, info.Firmware)
	id.putString(IDModel, 40, info.Model)
	id[IDMaxMultiple] = 0x8000 | uint16(info.maxMultiple())
	g := s.geom
	id[IDCurCylinders] = g.Cylinders
	id[IDCurHeads] = uint16(g.Heads)
	id[IDCurSectors] = uint16(g.SectorsPerTrack)
	chs := uint32(min(g.Sectors(), 0xFFFFFFFF))
	id[IDCurCapacity], id[IDCurCapacity+1] = uint16(chs), uint16(chs>>16)
	id[IDMultiple] = 0x0100 | uint16(s.multiple)
	lba28 := uint32(min(info.Sectors, MaxLBA28))
	id[IDLBA28Capacity], id[IDLBA28Capacity+1] = uint16(lba28), uint16(lba28>>16)
	for i := 0; i < 4; i++ {
		id[IDLBA48Capacity+i] = uint16(info.Sectors >> (16 * i))
	}
	l, p := info.logical(), info.physical()
	w106 := uint16(0x4000)
	if p > l {
		w106 |= 0x2000 | uint16(bits.TrailingZeros(uint(p/l))&0xF)
	}
	if l > 512 {
		w106 |= 0x1000
		words := uint32(l / 2)
		id[IDLogicalSize], id[IDLogicalSize+1] = uint16(words), uint16(words>>16)
	}
	id[IDSectorSize] = w106
}

// fillTransfer writes the capabilities and the PIO and DMA modes, the one
// SET FEATURES selected marked.
func (info *DeviceInfo) fillTransfer(id *Identify, s *settings) {
	sw, mw, udma := info.dmaModes()
	id[IDCapabilities] = 0x0E00 // IORDY, IORDY can be disabled, LBA
	if sw|mw|udma != 0 {
		id[IDCapabilities] |= 0x0100
	}
	id[IDCapabilities2] = 0x4000
	id[IDPIOTiming] = 0x0200
	id[IDFieldValid] = 0x0003
	if udma != 0 {
		id[IDFieldValid] |= 0x0004
	}
	id[IDSWDMA] = uint16(sw)
	id[IDMWDMA] = uint16(mw)
	id[IDUDMA] = uint16(udma)
	if m := s.dmaMode; m != 0 {
		switch m &^ 7 {
		case XferSWDMA0:
			id[IDSWDMA] |= 0x100 << (m & 7)
		case XferMWDMA0:
			id[IDMWDMA] |= 0x100 << (m & 7)
		case XferUDMA0:
			id[IDUDMA] |= 0x100 << (m & 7)
		}
	}
	id[IDPIOModes] = 0x0003
	if mw != 0 {
		id[IDMWDMACycleMin], id[IDMWDMACycleRec] = 120, 120
	}
	id[IDPIOCycleMin], id[IDPIOCycleIORDY] = 120, 120
}

// fillFeatures writes the versions and command sets supported and
// enabled, TRIM and the rotation rate.
func (info *DeviceInfo) fillFeatures(id *Identify, s *settings) {
	id[IDMajorVersion] = 0x01F0 // ATA-4 .. ATA8-ACS
	set1 := uint16(0x4009)      // NOP, power management, SMART
	en1 := set1
	if s.smartOff {
		en1 &^= 0x0001
	}
	if info.WriteCache {
		set1 |= 0x0020
		if s.writeCache {
			en1 |= 0x0020
		}
	}
	id[IDCmdSet1], id[IDCmdEnabled1] = set1, en1
	id[IDCmdSet2], id[IDCmdEnabled2] = 0x7400, 0x3400
	id[IDCmdSetExt], id[IDCmdEnabledExt] = 0x4040, 0x4040
	if info.WWN != 0 {
		id[IDCmdSetExt] |= 0x0100
		id[IDCmdEnabledExt] |= 0x0100
		for i := range 4 {
			id[IDWWN+i] = uint16(info.WWN >> (48 - 16*i))
		}
	}
	id[IDHWReset] = 0x6001
	if info.TRIM {
		id[IDDSM] = 0x0001
		id[IDMaxDSMBlocks] = MaxDSMBlocks
		if info.TrimZeroes {
			id[IDAddSupported] = 0x4020
		}
	}
	id[IDRotationRate] = info.RotationRate
}

// MaxDSMBlocks is the most 512-byte blocks of range entries a DATA SET
// MANAGEMENT command may carry (IDENTIFY word 105).
const MaxDSMBlocks = 8

// putString writes s into the n-character string field at word w: space
// padded, first character in the high byte of each word.
func (id *Identify) putString(w, n int, s string) {
	for i := 0; i < n; i += 2 {
		id[w+i/2] = uint16(strChar(s, i))<<8 | uint16(strChar(s, i+1))
	}
}

func strChar(s string, i int) byte {
	if i >= len(s) {
		return ' '
	}
	if c := s[i]; c >= 0x20 && c <= 0x7E {
		return c
	}
	return '?'
}

// getString reads the n-character string at word w without its trailing
// spaces (and leading ones, which some drives pad with).
func (id *Identify) getString(w, n int) string {
	b := make([]byte, n)
	for i := 0; i < n; i += 2 {
		b[i], b[i+1] = byte(id[w+i/2]>>8), byte(id[w+i/2])
	}
	return strings.TrimSpace(string(b))
}

// Model returns words 27-46 without padding.
func (id *Identify) Model() string { return id.getString(IDModel, 40) }

// Serial returns words 10-19 without padding.
func (id *Identify) Serial() string { return id.getString(IDSerial, 20) }

// Firmware returns words 23-26 without padding.
func (id *Identify) Firmware() string { return id.getString(IDFirmware, 8) }

// LBA48 reports whether the device supports 48-bit addressing the way
// Linux tests it: word 83 bit 10 and a non-zero capacity in words 100-103.
func (id *Identify) LBA48() bool {
	return id[IDCmdSet2]&0xC000 == 0x4000 && id[IDCmdSet2]&0x0400 != 0 && id.lba48Capacity() != 0
}

func (id *Identify) lba48Capacity() uint64 {
	return uint64(id[100]) | uint64(id[101])<<16 | uint64(id[102])<<32 | uint64(id[103])<<48
}

// Sectors returns the capacity in logical sectors: words 100-103 when
// LBA48 is supported, else words 60-61.
func (id *Identify) Sectors() uint64 {
	if id.LBA48() {
		return id.lba48Capacity()
	}
	return uint64(id[60]) | uint64(id[61])<<16
}

// LogicalSectorSize returns the bytes per LBA from words 106 and 117-118.
func (id *Identify) LogicalSectorSize() int {
	w := id[IDSectorSize]
	if w&0xC000 == 0x4000 && w&0x1000 != 0 {
		return 2 * int(uint32(id[117])|uint32(id[118])<<16)
	}
	return 512
}

// MaxMultiple returns the largest READ/WRITE MULTIPLE block (word 47).
func (id *Identify) MaxMultiple() uint8 { return uint8(id[IDMaxMultiple]) }

// Multiple returns the current multiple count (word 59), 0 if none is set.
func (id *Identify) Multiple() uint8 {
	if id[IDMultiple]&0x0100 == 0 {
		return 0
	}
	return uint8(id[IDMultiple])
}

// WriteCacheEnabled reports word 85 bit 5.
func (id *Identify) WriteCacheEnabled() bool { return id[IDCmdEnabled1]&0x0020 != 0 }

// TRIM reports word 169 bit 0.
func (id *Identify) TRIM() bool { return id[IDDSM]&1 != 0 }

// DMAMode returns the selected DMA transfer mode (XferUDMA0+n, ...) from
// words 88, 63 and 62, or 0 if none is selected.
func (id *Identify) DMAMode() XferMode {
	if sel := id[IDUDMA] >> 8 & 0x7F; sel != 0 && id[IDFieldValid]&4 != 0 {
		return XferUDMA0 + XferMode(bits.TrailingZeros16(sel))
	}
	if sel := id[IDMWDMA] >> 8 & 7; sel != 0 {
		return XferMWDMA0 + XferMode(bits.TrailingZeros16(sel))
	}
	if sel := id[IDSWDMA] >> 8 & 7; sel != 0 {
		return XferSWDMA0 + XferMode(bits.TrailingZeros16(sel))
	}
	return 0
}

// Checksum returns the byte that makes the 512 wire bytes sum to 0 mod
// 256 when it is the high byte of word 255 (ACS-3 §7.12.7.92).
func (id *Identify) Checksum() uint8 {
	var sum uint8
	for i := 0; i < 255; i++ {
		sum += uint8(id[i]) + uint8(id[i]>>8)
	}
	sum += uint8(id[IDIntegrity])
	return -sum
}

// Seal writes word 255: A5h in the low byte and the checksum in the high
// byte. Call it after changing any word.
func (id *Identify) Seal() {
	id[IDIntegrity] = IntegritySignature
	id[IDIntegrity] |= uint16(id.Checksum()) << 8
}

// ChecksumOK reports whether word 255 carries A5h and the 512 bytes sum to
// 0 mod 256, the check smartmontools and hdparm apply.
func (id *Identify) ChecksumOK() bool {
	return uint8(id[IDIntegrity]) == IntegritySignature && uint8(id[IDIntegrity]>>8) == id.Checksum()
}

// Bytes returns the 512 bytes the device sends through the data register:
// each word little-endian.
func (id *Identify) Bytes() [IdentifySize]byte {
	var b [IdentifySize]byte
	id.Put(b[:])
	return b
}

// Put writes the 512 wire bytes into b, which must hold at least 512.
func (id *Identify) Put(b []byte) {
	_ = b[IdentifySize-1]
	for i, w := range id {
		binary.LittleEndian.PutUint16(b[2*i:], w)
	}
}

// ParseIdentify reads 512 wire bytes. A short b is io.ErrUnexpectedEOF;
// data that carries the A5h signature with a wrong checksum is
// ErrIdentifyChecksum (data without the signature is accepted unchecked,
// as smartmontools does).
func ParseIdentify(b []byte) (Identify, error) {
	var id Identify
	if len(b) < IdentifySize {
		return id, io.ErrUnexpectedEOF
	}
	for i := range id {
		id[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	if uint8(id[IDIntegrity]) == IntegritySignature && !id.ChecksumOK() {
		return id, ErrIdentifyChecksum
	}
	return id, nil
}

// AppendHex appends the data in the text form of Linux's
// /proc/ide/hdX/identify and `hdparm --Istdout`, which `hdparm --Istdin`
// reads: 256 words as four lower-case hex digits, eight to a line.
func (id *Identify) AppendHex(b []byte) []byte {
	const digits = "0123456789abcdef"
	for i, w := range id {
		b = append(b, digits[w>>12], digits[w>>8&15], digits[w>>4&15], digits[w&15])
		if i%8 == 7 {
			b = append(b, '\n')
		} else {
			b = append(b, ' ')
		}
	}
	return b
}

// CurrentGeometry returns the CHS translation in use (words 54-56 when
// word 53 bit 0 says they are valid), else DefaultGeometry of Sectors.
func (id *Identify) CurrentGeometry() Geometry {
	g := Geometry{Cylinders: id[IDCurCylinders], Heads: uint8(id[IDCurHeads]), SectorsPerTrack: uint8(id[IDCurSectors])}
	if id[IDFieldValid]&1 == 0 || g.Cylinders == 0 || g.Heads == 0 || g.Heads > 16 || g.SectorsPerTrack == 0 {
		return DefaultGeometry(id.Sectors())
	}
	return g
}
