package ata

// Addressing says how a command's task file carries its address.
type Addressing uint8

// Addressing modes.
const (
	// AddrNone: the command has no address; Command.LBA holds the raw LBA
	// registers (24 bits, or 48 for an EXT command) as parameters.
	AddrNone Addressing = iota
	// AddrLBA28: LBA 27:0 in LBA low/mid/high and device bits 3:0, with the
	// device register's LBA bit set.
	AddrLBA28
	// AddrLBA48: LBA 47:0 in the LBA registers and their HOB bytes.
	AddrLBA48
	// AddrCHS: cylinder/head/sector through the current Geometry, with the
	// LBA bit clear.
	AddrCHS
)

var addrNames = [...]string{"none", "LBA28", "LBA48", "CHS"}

func (a Addressing) String() string {
	if int(a) < len(addrNames) {
		return addrNames[a]
	}
	return "addressing(" + hex8(uint8(a)) + ")"
}

// MaxLBA28 is the largest LBA a 28-bit command can address, and the value
// IDENTIFY words 60-61 are clamped to.
const MaxLBA28 = 1<<28 - 1

// MaxLBA48 is the largest LBA a 48-bit command can address.
const MaxLBA48 = 1<<48 - 1

// Command is a decoded ATA command: what the device executes. It is a plain
// value; decoding and encoding it allocate nothing.
type Command struct {
	Op Opcode
	// Addressing is how the task file carries LBA.
	Addressing Addressing
	// LBA is the first sector for an addressed command, or the raw LBA
	// registers (parameters) for AddrNone.
	LBA uint64
	// Count is the number of sectors (1-256 for a 28-bit command, 1-65536
	// for a 48-bit one) for an Op that is Counted, else the raw sector
	// count register (a parameter such as the SET FEATURES mode).
	Count uint32
	// Features is the features register (with its HOB byte for EXT
	// commands).
	Features uint16
	// Device is the device register without the bits that carry the
	// address: for an addressed command the LBA bit and, for LBA28 and CHS,
	// bits 3:0 are left out. DeviceDEV selects device 1.
	Device DeviceBits
}

// Name returns the command's name, for example "READ DMA EXT".
func (c *Command) Name() string { return c.Op.String() }

// Protocol returns how the command moves its data (for SMART it depends
// on the subcommand in Features).
func (c *Command) Protocol() Protocol {
	if c.smartDataIn() {
		return ProtocolPIOIn
	}
	return c.Op.Protocol()
}

// FUA reports whether the command forces its data to stable storage.
func (c *Command) FUA() bool { return c.Op.FUA() }

// ToDevice reports whether data moves from the host to the device.
func (c *Command) ToDevice() bool { return c.Op.ToDevice() }

// Bytes returns the size of the command's data phase given the logical
// sector size: Count sectors for reads and writes, 512 for IDENTIFY
// DEVICE and SMART READ DATA/THRESHOLDS, Count 512-byte blocks for DATA
// SET MANAGEMENT, 0 otherwise.
func (c *Command) Bytes(sectorSize int) int64 {
	switch {
	case c.Op == CmdIdentifyDevice, c.smartDataIn():
		return 512
	case c.Op == CmdDataSetManagement:
		return int64(c.Count) * 512
	case c.Op.Addressed() && c.Op.Counted() && c.Op.Protocol() != ProtocolNonData:
		return int64(c.Count) * int64(sectorSize)
	}
	return 0
}

// Decode turns tf into c, resolving a CHS address through g. It never
// allocates. Unknown opcodes decode as non-data commands with their raw
// registers (the device then aborts them). The only error is ErrBadCHS, for
// a CHS address outside g; c is filled all the same with LBA 0.
func Decode(tf *TaskFile, g Geometry, c *Command) error {
	op := tf.Command
	info := &ops[op]
	*c = Command{Op: op}
	dev := tf.Device
	ext := info.flags&f48 != 0
	if ext {
		c.Features = uint16(tf.Features) | uint16(tf.HOBFeatures)<<8
		c.Count = uint32(tf.Count) | uint32(tf.HOBCount)<<8
		if c.Count == 0 && info.flags&fCount != 0 {
			c.Count = 65536
		}
	} else {
		c.Features = uint16(tf.Features)
		c.Count = uint32(tf.Count)
		if c.Count == 0 && info.flags&fCount != 0 {
			c.Count = 256
		}
	}
	switch {
	case info.flags&fAddr == 0:
		c.Addressing = AddrNone
		c.Device = dev
		if ext {
			c.LBA = tf.lba48()
		} else {
			c.LBA = tf.lba24()
		}
	case ext:
		// ACS-3 requires the LBA bit for EXT commands; the address is
		// 48-bit whatever the host left in it.
		c.Addressing = AddrLBA48
		c.Device = dev &^ DeviceLBA
		c.LBA = tf.lba48()
	case dev&DeviceLBA != 0:
		c.Addressing = AddrLBA28
		c.Device = dev &^ (DeviceLBA | DeviceHeadMask)
		c.LBA = tf.lba24() | uint64(dev&DeviceHeadMask)<<24
	default:
		c.Addressing = AddrCHS
		c.Device = dev &^ (DeviceLBA | DeviceHeadMask)
		cyl := uint16(tf.LBAMid) | uint16(tf.LBAHigh)<<8
		lba, ok := g.LBA(cyl, dev.Head(), tf.LBALow)
		if !ok {
			return ErrBadCHS
		}
		c.LBA = lba
	}
	return nil
}

// Encode turns c into a task file, the reverse of Decode: CHS addresses are
// computed through g, a count of 256 (65536) is written as 0, and the LBA bit
// is set for LBA addressing. Control is left 0. It fails with
// ErrOutOfRange when a field does not fit the command's registers.
func (c *Command) Encode(g Geometry, tf *TaskFile) error {
	info := &ops[c.Op]
	ext := info.flags&f48 != 0
	*tf = TaskFile{Command: c.Op}
	counted := info.flags&fCount != 0
	if ext {
		if c.Count > 65536 || (c.Count == 65536 && !counted) || (c.Count == 0 && counted) {
			return ErrOutOfRange
		}
		tf.Features, tf.HOBFeatures = uint8(c.Features), uint8(c.Features>>8)
		tf.Count, tf.HOBCount = uint8(c.Count), uint8(c.Count>>8)
	} else {
		if c.Features > 0xFF || c.Count > 256 || (c.Count == 256 && !counted) || (c.Count == 0 && counted) {
			return ErrOutOfRange
		}
		tf.Features = uint8(c.Features)
		tf.Count = uint8(c.Count)
	}
	want := AddrNone
	if info.flags&fAddr != 0 {
		switch {
		case ext:
			want = AddrLBA48
		case c.Addressing == AddrCHS:
			want = AddrCHS
		default:
			want = AddrLBA28
		}
	}
	if c.Addressing != want {
		return ErrOutOfRange
	}
	switch c.Addressing {
	case AddrNone:
		if (ext && c.LBA > MaxLBA48) || (!ext && c.LBA > 0xFFFFFF) {
			return ErrOutOfRange
		}
		tf.setLBA48(c.LBA)
		if !ext {
			tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh = 0, 0, 0
		}
		tf.Device = c.Device
	case AddrLBA48:
		if c.LBA > MaxLBA48 || c.Device&DeviceLBA != 0 {
			return ErrOutOfRange
		}
		tf.setLBA48(c.LBA)
		tf.Device = c.Device | DeviceLBA
	case AddrLBA28:
		if c.LBA > MaxLBA28 || c.Device&(DeviceLBA|DeviceHeadMask) != 0 {
			return ErrOutOfRange
		}
		tf.setLBA24(c.LBA)
		tf.Device = c.Device | DeviceLBA | DeviceBits(c.LBA>>24)&DeviceHeadMask
	case AddrCHS:
		if c.Device&(DeviceLBA|DeviceHeadMask) != 0 {
			return ErrOutOfRange
		}
		cyl, head, sect, ok := g.CHS(c.LBA)
		if !ok {
			return ErrOutOfRange
		}
		tf.LBALow, tf.LBAMid, tf.LBAHigh = sect, uint8(cyl), uint8(cyl>>8)
		tf.Device = c.Device | DeviceBits(head)
	}
	return nil
}

// Geometry is a CHS translation: cylinders, heads and sectors per track.
// ACS-3 made CHS obsolete; old hosts and BIOSes still use it.
type Geometry struct {
	Cylinders       uint16
	Heads           uint8 // 1-16
	SectorsPerTrack uint8 // 1-255
}

// DefaultGeometry returns the geometry QEMU and most BIOSes report for a
// disk of the given number of sectors (QEMU hw/block/hd-geometry.c): 16
// heads, 63 sectors per track, and sectors/1008 cylinders clamped to
// 1..16383, so CHS reaches at most 16,514,064 sectors.
func DefaultGeometry(sectors uint64) Geometry {
	c := sectors / (16 * 63)
	if c > 16383 {
		c = 16383
	}
	if c < 1 {
		c = 1
	}
	return Geometry{Cylinders: uint16(c), Heads: 16, SectorsPerTrack: 63}
}

// TranslatedGeometry is the geometry after INITIALIZE DEVICE PARAMETERS
// sets heads and sectors per track on a device of the given capacity: as
// many cylinders as fit, 1 to 65535.
func TranslatedGeometry(sectors uint64, heads, spt uint8) Geometry {
	c := uint64(1)
	if heads != 0 && spt != 0 {
		c = max(1, min(sectors/(uint64(heads)*uint64(spt)), 65535))
	}
	return Geometry{Cylinders: uint16(c), Heads: heads, SectorsPerTrack: spt}
}

// Sectors returns the number of sectors g addresses, C·H·S.
func (g Geometry) Sectors() uint64 {
	return uint64(g.Cylinders) * uint64(g.Heads) * uint64(g.SectorsPerTrack)
}

// LBA converts a CHS address to an LBA: (c·H + h)·S + s − 1. It reports
// false when the address is outside g (sector 0, sector above S, head at or
// above H, cylinder at or above C).
func (g Geometry) LBA(c uint16, h, s uint8) (uint64, bool) {
	if s == 0 || s > g.SectorsPerTrack || h >= g.Heads || c >= g.Cylinders {
		return 0, false
	}
	return (uint64(c)*uint64(g.Heads)+uint64(h))*uint64(g.SectorsPerTrack) + uint64(s) - 1, true
}

// CHS converts an LBA to a CHS address: track = LBA/S, c = track/H,
// h = track%H, s = LBA%S + 1 (Linux ata_build_rw_tf). It reports false when
// lba is at or beyond g.Sectors().
func (g Geometry) CHS(lba uint64) (c uint16, h, s uint8, ok bool) {
	if g.Heads == 0 || g.SectorsPerTrack == 0 || lba >= g.Sectors() {
		return 0, 0, 0, false
	}
	track := lba / uint64(g.SectorsPerTrack)
	return uint16(track / uint64(g.Heads)), uint8(track % uint64(g.Heads)), uint8(lba%uint64(g.SectorsPerTrack)) + 1, true
}
