package ata

import "encoding/binary"

// DiagPassed is the error register after reset and EXECUTE DEVICE
// DIAGNOSTIC: device 0 passed, device 1 absent.
const DiagPassed = 0x01

// ReadReg reads a register as the host does. Reading RegStatus clears a
// pending interrupt, RegAltStatus does not. With HOB set in the device
// control register, the count and LBA registers return their previous
// byte (the error register is not affected). Reading RegData moves one 16-bit word and returns its low
// byte; use ReadData16. While device 1 (absent) is selected, the status
// registers read 0.
func (d *Device) ReadReg(r Reg) uint8 {
	hob := 0
	if d.ctl&ControlHOB != 0 {
		hob = 1
	}
	switch r {
	case RegData:
		return uint8(d.ReadData16())
	case RegError:
		return uint8(d.errReg)
	case RegCount:
		return d.count[hob]
	case RegLBALow:
		return d.lbal[hob]
	case RegLBAMid:
		return d.lbam[hob]
	case RegLBAHigh:
		return d.lbah[hob]
	case RegDevice:
		return uint8(d.dev)
	case RegStatus:
		if !d.selected() {
			return 0
		}
		d.intrq = false
		return uint8(d.status)
	case RegAltStatus:
		if !d.selected() {
			return 0
		}
		return uint8(d.status)
	}
	return 0xFF
}

// WriteReg writes a register as the host does. Writes to the command block
// while BSY or DRQ is set (or SRST held) are ignored, as on hardware. Each
// write to features, count or an LBA register pushes the previous byte into
// the HOB half and clears HOB. Writing RegCommand runs the command.
// Writing RegData moves one 16-bit word (v in the low byte, 0 high); use
// WriteData16. The device control register is always written.
func (d *Device) WriteReg(r Reg, v uint8) {
	if r == RegDeviceControl {
		d.writeControl(Control(v))
		return
	}
	if r == RegData {
		d.WriteData16(uint16(v))
		return
	}
	if d.state != StateIdle || r > RegCommand {
		return
	}
	d.ctl &^= ControlHOB
	switch r {
	case RegFeatures:
		d.feat[1], d.feat[0] = d.feat[0], v
	case RegCount:
		d.count[1], d.count[0] = d.count[0], v
	case RegLBALow:
		d.lbal[1], d.lbal[0] = d.lbal[0], v
	case RegLBAMid:
		d.lbam[1], d.lbam[0] = d.lbam[0], v
	case RegLBAHigh:
		d.lbah[1], d.lbah[0] = d.lbah[0], v
	case RegDevice:
		d.dev = DeviceBits(v)
	case RegCommand:
		d.command(Opcode(v))
	}
}

// TaskFile returns the command block registers: the current bytes and the
// HOB bytes (what the host reads with HOB clear and set), and the device
// control register; Command is 0 and Features holds the features register
// the host wrote (Status and Error return the read-side registers). After a
// command it is the output task file (for a Device-to-Host FIS): the LBA of
// an error, a signature, a power mode.
func (d *Device) TaskFile() TaskFile {
	tf := d.taskFile()
	tf.Control = d.ctl
	return tf
}

// Issue loads tf into the registers the way a host does (for an EXT
// command the HOB bytes first, then the current ones, then the device
// register) and writes its command: the path for a bridge that receives a
// whole task file at once (an AHCI FIS, an AoE header). tf.Control is not
// written. Like WriteReg it is ignored unless the device is idle.
func (d *Device) Issue(tf *TaskFile) {
	if d.state != StateIdle {
		return
	}
	d.feat = [2]uint8{tf.Features, tf.HOBFeatures}
	d.count = [2]uint8{tf.Count, tf.HOBCount}
	d.lbal = [2]uint8{tf.LBALow, tf.HOBLBALow}
	d.lbam = [2]uint8{tf.LBAMid, tf.HOBLBAMid}
	d.lbah = [2]uint8{tf.LBAHigh, tf.HOBLBAHigh}
	d.dev = tf.Device
	d.ctl &^= ControlHOB
	d.command(tf.Command)
}

func (d *Device) writeControl(c Control) {
	old := d.ctl
	d.ctl = c
	switch {
	case c&ControlSRST != 0 && old&ControlSRST == 0:
		d.step(EvSRST)
		d.status = StatusBSY
		d.intrq = false
		d.pos, d.end = 0, 0
	case c&ControlSRST == 0 && old&ControlSRST != 0:
		// Software reset: settings are kept (as with software settings
		// preservation), the registers get the signature and the
		// diagnostic result; no interrupt.
		d.step(EvSRSTRelease)
		d.signature()
		d.status = StatusDRDY | StatusDSC
		d.intrq = false
	case c&ControlNIEN == 0 && old&ControlNIEN != 0 && d.intrq && d.irq != nil:
		d.irq()
	}
}

// HardReset is a hardware reset (the RESET- signal or power cycle): any
// command in progress is dropped, the settings return to their power-on
// values (write cache, multiple count, DMA mode, geometry), and the
// registers hold the signature and diagnostic result, as after SRST. The
// device control register is cleared.
func (d *Device) HardReset() {
	d.ctl = 0
	d.step(EvSRST)
	d.step(EvSRSTRelease)
	d.set = d.info.powerOn()
	d.refreshIdentify()
	d.standby = false
	d.signature()
	d.status = StatusDRDY | StatusDSC
	d.intrq = false
	d.pos, d.end = 0, 0
}

// signature loads the ATA signature and the diagnostic result.
func (d *Device) signature() {
	d.count = [2]uint8{1, 0} // HOB halves cleared, as QEMU's ide_reset
	d.lbal = [2]uint8{1, 0}
	d.lbam = [2]uint8{}
	d.lbah = [2]uint8{}
	d.feat = [2]uint8{}
	d.dev = 0
	d.errReg = DiagPassed
}

func (d *Device) taskFile() TaskFile {
	return TaskFile{
		Features: d.feat[0], Count: d.count[0], LBALow: d.lbal[0], LBAMid: d.lbam[0], LBAHigh: d.lbah[0],
		Device:      d.dev,
		HOBFeatures: d.feat[1],
		HOBCount:    d.count[1], HOBLBALow: d.lbal[1], HOBLBAMid: d.lbam[1], HOBLBAHigh: d.lbah[1],
	}
}

// setLBA writes lba into the LBA registers as addressing reads them.
func (d *Device) setLBA(lba uint64, a Addressing) {
	switch a {
	case AddrLBA48:
		d.lbal = [2]uint8{uint8(lba), uint8(lba >> 24)}
		d.lbam = [2]uint8{uint8(lba >> 8), uint8(lba >> 32)}
		d.lbah = [2]uint8{uint8(lba >> 16), uint8(lba >> 40)}
	case AddrCHS:
		c, h, s, ok := d.set.geom.CHS(lba)
		if !ok {
			return
		}
		d.lbal[0], d.lbam[0], d.lbah[0] = s, uint8(c), uint8(c>>8)
		d.dev = d.dev&^DeviceHeadMask | DeviceBits(h)
	default:
		d.lbal[0], d.lbam[0], d.lbah[0] = uint8(lba), uint8(lba>>8), uint8(lba>>16)
		d.dev = d.dev&^DeviceHeadMask | DeviceBits(lba>>24)&DeviceHeadMask
	}
}

// ReadData16 reads the data register: the next word of the current PIO-in
// block (little-endian: the first byte in bits 7:0). Outside a PIO-in data
// phase it reads FFFFh and changes nothing.
func (d *Device) ReadData16() uint16 {
	if d.state != StatePIOIn || d.pos+2 > d.end {
		return 0xFFFF
	}
	v := binary.LittleEndian.Uint16(d.buf[d.pos:])
	d.pos += 2
	if d.pos >= d.end {
		d.blockDone()
	}
	return v
}

// WriteData16 writes the data register: the next word of the current
// PIO-out block. Outside a PIO-out data phase it is ignored.
func (d *Device) WriteData16(v uint16) {
	if d.state != StatePIOOut || d.pos+2 > d.end {
		return
	}
	binary.LittleEndian.PutUint16(d.buf[d.pos:], v)
	d.pos += 2
	if d.pos >= d.end {
		d.blockDone()
	}
}

// ReadData32 is a 32-bit access to the data register: two words, the first
// in bits 15:0.
func (d *Device) ReadData32() uint32 {
	if d.state == StatePIOIn && d.pos+4 < d.end {
		v := binary.LittleEndian.Uint32(d.buf[d.pos:])
		d.pos += 4
		return v
	}
	lo := d.ReadData16()
	return uint32(lo) | uint32(d.ReadData16())<<16
}

// WriteData32 is a 32-bit access to the data register: bits 15:0 first.
func (d *Device) WriteData32(v uint32) {
	if d.state == StatePIOOut && d.pos+4 < d.end {
		binary.LittleEndian.PutUint32(d.buf[d.pos:], v)
		d.pos += 4
		return
	}
	d.WriteData16(uint16(v))
	d.WriteData16(uint16(v >> 16))
}

// ReadData moves up to len(p) bytes of the current PIO-in block into p, as
// len(p)/2 data register reads would, stopping at the end of the block. It
// returns the bytes moved; an odd last byte is not moved.
func (d *Device) ReadData(p []byte) int {
	if d.state != StatePIOIn {
		return 0
	}
	n := copy(p[:len(p)&^1], d.buf[d.pos:d.end])
	d.pos += n
	if d.pos >= d.end {
		d.blockDone()
	}
	return n
}

// WriteData moves up to len(p) bytes from p into the current PIO-out
// block, as len(p)/2 data register writes would, stopping at the end of the
// block. It returns the bytes moved.
func (d *Device) WriteData(p []byte) int {
	if d.state != StatePIOOut {
		return 0
	}
	n := copy(d.buf[d.pos:d.end], p[:len(p)&^1])
	d.pos += n
	if d.pos >= d.end {
		d.blockDone()
	}
	return n
}

// PutD2HFIS writes the device's output registers as a Register
// Device-to-Host FIS, with the I bit set when an interrupt is pending: what
// an AHCI front end sends the host when a command ends.
func (d *Device) PutD2HFIS(b *[FISSize]byte) {
	tf := d.taskFile()
	PutD2HFIS(b, d.status, d.errReg, &tf, d.intrq)
}
