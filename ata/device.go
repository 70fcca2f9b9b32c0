package ata

import (
	"context"
	"encoding/binary"
	"io"
)

// SET FEATURES subcommands (features register) the device implements;
// every other subcommand aborts.
const (
	FeatureEnableWriteCache  = 0x02
	FeatureSetTransferMode   = 0x03
	FeatureDisableWriteCache = 0x82
)

// Transfer-mode codes for SET FEATURES 03h, written to the sector count
// register (Linux XFER_*): the class in bits 7:3, the mode in bits 2:0.
const (
	XferPIODefault    = 0x00
	XferPIODefNoIORDY = 0x01
	XferPIO0          = 0x08
	XferSWDMA0        = 0x10
	XferMWDMA0        = 0x20
	XferUDMA0         = 0x40
)

// DSMTrim is the DATA SET MANAGEMENT features bit that selects TRIM.
const DSMTrim = 0x0001

// Power modes reported by CHECK POWER MODE in the sector count register.
const (
	PowerStandby = 0x00
	PowerActive  = 0xFF
)

// DiagPassed is the error register after reset and EXECUTE DEVICE
// DIAGNOSTIC: device 0 passed, device 1 absent.
const DiagPassed = 0x01

// Config is what NewDevice needs.
type Config struct {
	// Info describes the device; it must pass Validate.
	Info DeviceInfo
	// Backend holds the sectors; see Backend for the optional methods.
	Backend Backend
	// DMA moves the data of DMA commands. Without one the device does no
	// DMA: IDENTIFY says so and DMA commands abort.
	DMA DMA
	// Context is passed to the backend's Flush and Trim; nil means
	// context.Background().
	Context context.Context
	// Interrupt, if set, is called each time the device asserts INTRQ
	// (not called while nIEN masks it), from the goroutine that made the
	// register access. It must not call back into the Device.
	Interrupt func()
}

// Device is an ATA disk at register level: the host side writes and reads
// its registers (WriteReg, ReadReg, the data register methods), the device
// decodes and runs each command against its Backend, moving data by PIO
// through the data register or by DMA through its DMA engine.
//
// A command's backend and DMA work runs inside the register access that
// starts it (the command register write, the last data word of a PIO
// block, SRST release); while it runs the state is StateBusy or StateDMA
// and the status register says BSY or DRQ, which a DMA engine or backend
// that looks at the device sees. A Device is not safe for concurrent use:
// one goroutine plays the host. Run commands in parallel with several
// Devices on one backend. In steady state no register access allocates.
type Device struct {
	info    DeviceInfo
	sector  int
	track   tracker
	dsm     memWriter
	flusher Flusher
	syncer  Syncer
	trimmer Trimmer
	dma     DMA
	ctx     context.Context
	irq     func()

	set     settings
	id      Identify
	standby bool

	// The register file. [0] is the current byte, [1] the previous one,
	// read with HOB=1.
	feat, count, lbal, lbam, lbah [2]uint8
	dev                           DeviceBits
	status                        Status
	errReg                        ErrorBits
	ctl                           Control
	intrq                         bool

	state State
	cmd   Command
	fault error

	// PIO transfer.
	buf  []byte
	pos  int    // next byte of the block in buf
	end  int    // length of the current block
	lba  uint64 // first sector of the current block
	blk  uint32 // sectors in the current block
	left uint32 // sectors after the current block

	lastErr error
}

// memWriter is the io.WriterAt the DMA engine writes DATA SET MANAGEMENT
// range entries into.
type memWriter struct{ b []byte }

func (m *memWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) || int64(len(p)) > int64(len(m.b))-off {
		return 0, io.ErrShortWrite
	}
	return copy(m.b[off:], p), nil
}

// NewDevice returns a powered-on device in StateIdle with the ATA
// signature in its registers. It fails with an error wrapping ErrInfo for
// an invalid Info (or one larger than a backend with a Size method), and
// with ErrNoBackend.
func NewDevice(c Config) (*Device, error) {
	if c.Backend == nil {
		return nil, ErrNoBackend
	}
	if err := c.Info.Validate(); err != nil {
		return nil, err
	}
	d := &Device{info: c.Info, dma: c.DMA, ctx: c.Context, irq: c.Interrupt}
	if d.ctx == nil {
		d.ctx = context.Background()
	}
	if d.dma == nil {
		d.info.NoDMA = true
	}
	d.sector = d.info.logical()
	if s, ok := c.Backend.(Sizer); ok && uint64(s.Size())/uint64(d.sector) < d.info.Sectors {
		return nil, &infoError{"Sectors exceeds the backend's Size"}
	}
	d.track.b = c.Backend
	d.flusher, _ = c.Backend.(Flusher)
	if d.flusher == nil {
		d.syncer, _ = c.Backend.(Syncer)
	}
	d.trimmer, _ = c.Backend.(Trimmer)
	n := int(d.info.maxMultiple()) * d.sector
	d.buf = make([]byte, max(n, MaxDSMBlocks*512, IdentifySize))
	d.set = d.info.powerOn()
	d.refreshIdentify()
	d.signature()
	d.status = StatusDRDY | StatusDSC
	return d, nil
}

func (d *Device) refreshIdentify() { d.info.fill(&d.id, &d.set) }

// Identify returns the device's current IDENTIFY DEVICE data, reflecting
// SET FEATURES, SET MULTIPLE MODE and INITIALIZE DEVICE PARAMETERS.
func (d *Device) Identify() Identify { return d.id }

// Info returns the description the device was built from (NoDMA set when
// it has no DMA engine).
func (d *Device) Info() DeviceInfo { return d.info }

// State returns the protocol state.
func (d *Device) State() State { return d.state }

// Status returns the status register without the side effect of reading
// it through ReadReg (like the alternate status register).
func (d *Device) Status() Status { return d.status }

// Error returns the error register.
func (d *Device) Error() ErrorBits { return d.errReg }

// INTRQ reports whether the interrupt line is asserted: an interrupt is
// pending and nIEN is clear. Reading the status register clears it.
func (d *Device) INTRQ() bool { return d.intrq && d.ctl&ControlNIEN == 0 }

// Command returns the last command the device accepted.
func (d *Device) Command() Command { return d.cmd }

// BackendErr returns the backend (or DMA engine) error that ended the last
// failed command, or nil. The host sees only the status and error
// registers; this is for logs.
func (d *Device) BackendErr() error { return d.lastErr }

// Fault returns the first illegal state-machine step the device took, or
// nil. It is never set unless the device has a bug; tests check it.
func (d *Device) Fault() error { return d.fault }

// SectorSize returns the logical sector size in bytes.
func (d *Device) SectorSize() int { return d.sector }

// step applies e through Transition and sets BSY and DRQ to match.
func (d *Device) step(e Event) {
	next, err := Transition(d.state, e)
	if err != nil {
		if d.fault == nil {
			d.fault = err
		}
		return
	}
	d.state = next
	d.status &^= StatusBSY | StatusDRQ
	switch next {
	case StateBusy, StateReset:
		d.status |= StatusBSY
	case StatePIOIn, StatePIOOut, StateDMA:
		d.status |= StatusDRQ
	}
}

func (d *Device) raise() {
	d.intrq = true
	if d.irq != nil && d.ctl&ControlNIEN == 0 {
		d.irq()
	}
}

// selected reports whether the host addresses this device (device 0).
func (d *Device) selected() bool { return d.dev&DeviceDEV == 0 }

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

// command starts op with the task file in the registers.
func (d *Device) command(op Opcode) {
	if !d.selected() && op != CmdExecuteDeviceDiagnostic {
		return
	}
	d.step(EvCommand)
	d.status = StatusBSY | StatusDRDY
	d.errReg = 0
	d.intrq = false
	d.lastErr = nil
	switch op {
	case CmdCheckPowerMode, CmdCheckPowerModeAlt, CmdStandby, CmdStandbyImmediate, CmdSleep:
	default:
		d.standby = false
	}
	tf := d.taskFile()
	tf.Command = op
	if err := Decode(&tf, d.set.geom, &d.cmd); err != nil {
		// A CHS address outside the current geometry.
		d.fail(0, ErrorIDNF|ErrorABRT, false)
		return
	}
	d.dispatch()
}

// dispatch runs d.cmd. It is entered in StateBusy.
func (d *Device) dispatch() {
	c := &d.cmd
	switch c.Op {
	case CmdReadSectors, CmdReadSectorsNoRetry, CmdReadSectorsExt, CmdReadMultiple, CmdReadMultipleExt:
		if d.rangeOK() && d.multipleOK() {
			d.lba, d.left = c.LBA, c.Count
			d.nextIn()
		}
	case CmdWriteSectors, CmdWriteSectorsNoRetry, CmdWriteSectorsExt, CmdWriteMultiple, CmdWriteMultipleExt, CmdWriteMultipleFUAExt:
		if d.rangeOK() && d.multipleOK() {
			d.lba, d.left = c.LBA, c.Count
			d.nextOut()
		}
	case CmdReadDMA, CmdReadDMANoRetry, CmdReadDMAExt, CmdWriteDMA, CmdWriteDMANoRetry, CmdWriteDMAExt, CmdWriteDMAFUAExt:
		if d.dma == nil {
			d.abort()
		} else if d.rangeOK() {
			d.transferDMA()
		}
	case CmdReadVerifySectors, CmdReadVerifySectorsNoRetry, CmdReadVerifySectorsExt:
		if d.rangeOK() {
			d.succeed()
		}
	case CmdSeek:
		if c.LBA >= d.info.Sectors {
			d.fail(c.LBA, ErrorIDNF|ErrorABRT, true)
		} else {
			d.succeed()
		}
	case CmdIdentifyDevice:
		d.id.Put(d.buf)
		d.lba, d.left, d.blk = 0, 0, 1
		d.pos, d.end = 0, IdentifySize
		d.step(EvDataIn)
		d.status |= StatusDRDY | StatusDSC
		d.raise()
	case CmdSetFeatures:
		d.setFeatures()
	case CmdSetMultipleMode:
		n := uint8(c.Count)
		if n != 0 && (n > d.info.maxMultiple() || n&(n-1) != 0) {
			d.abort()
			return
		}
		d.set.multiple = n
		d.refreshIdentify()
		d.succeed()
	case CmdInitializeDeviceParams:
		spt, heads := uint8(c.Count), c.Device.Head()+1
		if spt == 0 {
			d.abort()
			return
		}
		d.set.geom = TranslatedGeometry(d.info.Sectors, heads, spt)
		d.refreshIdentify()
		d.succeed()
	case CmdFlushCache, CmdFlushCacheExt:
		if err := d.flush(); err != nil {
			d.lastErr = err
			d.fail(0, ErrorABRT, false)
			d.status |= StatusDF
			return
		}
		d.succeed()
	case CmdDataSetManagement:
		d.trim()
	case CmdReadNativeMaxAddress:
		d.setLBA(min(d.info.Sectors-1, MaxLBA28), AddrLBA28)
		d.succeed()
	case CmdReadNativeMaxAddressExt:
		d.setLBA(d.info.Sectors-1, AddrLBA48)
		d.succeed()
	case CmdCheckPowerMode, CmdCheckPowerModeAlt:
		if d.standby {
			d.count[0] = PowerStandby
		} else {
			d.count[0] = PowerActive
		}
		d.succeed()
	case CmdStandby, CmdStandbyImmediate, CmdSleep:
		// SLEEP is taken as STANDBY, as QEMU does: the device stays
		// reachable without a reset.
		d.standby = true
		d.succeed()
	case CmdIdle, CmdIdleImmediate, CmdRecalibrate:
		d.succeed()
	case CmdExecuteDeviceDiagnostic:
		d.signature()
		d.step(EvComplete)
		d.status = StatusDRDY | StatusDSC
		d.raise()
	default:
		// NOP (ACS: always aborts) and every unsupported opcode.
		d.abort()
	}
}

// rangeOK checks that the command's sectors exist; if not it fails the
// command with IDNF|ABRT and the first missing LBA.
func (d *Device) rangeOK() bool {
	c := &d.cmd
	if c.LBA >= d.info.Sectors {
		d.fail(c.LBA, ErrorIDNF|ErrorABRT, true)
		return false
	}
	if c.LBA+uint64(c.Count) > d.info.Sectors {
		d.fail(d.info.Sectors, ErrorIDNF|ErrorABRT, true)
		return false
	}
	return true
}

func (d *Device) multipleOK() bool {
	if d.cmd.Op.Multiple() && d.set.multiple == 0 {
		d.abort()
		return false
	}
	return true
}

// blockSize returns the sectors in the next PIO block.
func (d *Device) blockSize() uint32 {
	if d.cmd.Op.Multiple() {
		return min(d.left, uint32(d.set.multiple))
	}
	return 1
}

// nextIn reads the next PIO-in block from the backend and raises DRQ.
func (d *Device) nextIn() {
	d.blk = d.blockSize()
	d.left -= d.blk
	d.end = int(d.blk) * d.sector
	d.pos = 0
	off := int64(d.lba) * int64(d.sector)
	d.track.reset(off, off+int64(d.end))
	if _, err := d.track.ReadAt(d.buf[:d.end], off); err != nil {
		d.readFailed(err)
		return
	}
	d.step(EvDataIn)
	d.status |= StatusDRDY | StatusDSC
	d.raise()
}

// nextOut raises DRQ for the next PIO-out block. The first block is
// requested without an interrupt, the later ones with one.
func (d *Device) nextOut() {
	first := d.left == d.cmd.Count
	d.blk = d.blockSize()
	d.left -= d.blk
	d.end = int(d.blk) * d.sector
	d.pos = 0
	d.step(EvDataOut)
	d.status |= StatusDRDY | StatusDSC
	if !first {
		d.raise()
	}
}

// blockDone is called when the host has moved the last word of a block.
func (d *Device) blockDone() {
	st := d.state
	d.step(EvBlockDone)
	d.status = StatusBSY | StatusDRDY
	if st == StatePIOIn {
		d.lba += uint64(d.blk)
		if d.left == 0 {
			// The last block of a PIO-in command ends without an
			// interrupt.
			d.step(EvComplete)
			d.status = StatusDRDY | StatusDSC
			return
		}
		d.nextIn()
		return
	}
	off := int64(d.lba) * int64(d.sector)
	d.track.reset(off, off+int64(d.end))
	if _, err := d.track.WriteAt(d.buf[:d.end], off); err != nil {
		d.writeFailed(err)
		return
	}
	d.lba += uint64(d.blk)
	if d.left == 0 {
		d.finishWrite()
		return
	}
	d.nextOut()
}

// finishWrite flushes a FUA write, or any write with the write cache off,
// and completes the command.
func (d *Device) finishWrite() {
	if d.cmd.FUA() || !d.set.writeCache {
		if err := d.flush(); err != nil {
			d.lastErr = err
			d.fail(d.cmd.LBA, ErrorABRT, true)
			d.status |= StatusDF
			return
		}
	}
	d.succeed()
}

func (d *Device) transferDMA() {
	c := &d.cmd
	off, n := int64(c.LBA)*int64(d.sector), int64(c.Count)*int64(d.sector)
	d.track.reset(off, off+n)
	d.step(EvDMA)
	d.status |= StatusDRDY | StatusDSC
	var err error
	if c.ToDevice() {
		err = d.dma.HostToDevice(&d.track, off, n)
	} else {
		err = d.dma.DeviceToHost(&d.track, off, n)
	}
	d.step(EvDMADone)
	d.status = StatusBSY | StatusDRDY
	if err != nil {
		switch {
		case !d.track.failed || d.track.err == ErrOutsideTransfer:
			// The engine failed on its own (host memory): not a media
			// error.
			d.lastErr = err
			d.fail(0, ErrorABRT, false)
		case c.ToDevice():
			d.writeFailed(err)
		default:
			d.readFailed(err)
		}
		return
	}
	if c.ToDevice() {
		d.finishWrite()
		return
	}
	d.succeed()
}

func (d *Device) failedLBA() uint64 {
	if d.track.failed {
		return uint64(d.track.off) / uint64(d.sector)
	}
	return d.lba
}

func (d *Device) readFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorUNC, true)
}

func (d *Device) writeFailed(err error) {
	d.lastErr = err
	d.fail(d.failedLBA(), ErrorABRT, true)
	d.status |= StatusDF
}

func (d *Device) flush() error {
	switch {
	case d.flusher != nil:
		return d.flusher.Flush(d.ctx)
	case d.syncer != nil:
		return d.syncer.Sync()
	}
	return nil
}

func (d *Device) setFeatures() {
	c := &d.cmd
	switch c.Features {
	case FeatureEnableWriteCache:
		if !d.info.WriteCache {
			d.abort()
			return
		}
		d.set.writeCache = true
	case FeatureDisableWriteCache:
		if !d.info.WriteCache {
			d.abort()
			return
		}
		if err := d.flush(); err != nil {
			d.lastErr = err
			d.fail(0, ErrorABRT, false)
			d.status |= StatusDF
			return
		}
		d.set.writeCache = false
	case FeatureSetTransferMode:
		mode := uint8(c.Count)
		n := mode & 7
		sw, mw, udma := d.info.dmaModes()
		switch mode &^ 7 {
		case 0x00:
			if n > 1 {
				d.abort()
				return
			}
		case XferPIO0:
			if n > 4 {
				d.abort()
				return
			}
		case XferSWDMA0, XferMWDMA0, XferUDMA0:
			var mask uint8
			switch mode &^ 7 {
			case XferSWDMA0:
				mask = sw
			case XferMWDMA0:
				mask = mw
			default:
				mask = udma
			}
			if mask&(1<<n) == 0 {
				d.abort()
				return
			}
			d.set.dmaMode = mode
		default:
			d.abort()
			return
		}
	default:
		d.abort()
		return
	}
	d.refreshIdentify()
	d.succeed()
}

// trim runs DATA SET MANAGEMENT: the range entries come in by DMA, each is
// checked against the capacity, and the non-empty ones go to the backend's
// Trim, adjacent ranges merged.
func (d *Device) trim() {
	c := &d.cmd
	if c.Features != DSMTrim || !d.info.TRIM || d.trimmer == nil || d.dma == nil || c.Count > MaxDSMBlocks {
		d.abort()
		return
	}
	n := int64(c.Count) * 512
	d.dsm.b = d.buf[:n]
	d.track.reset(0, 0)
	d.step(EvDMA)
	d.status |= StatusDRDY | StatusDSC
	err := d.dma.HostToDevice(&d.dsm, 0, n)
	d.step(EvDMADone)
	d.status = StatusBSY | StatusDRDY
	if err != nil {
		d.lastErr = err
		d.fail(0, ErrorABRT, false)
		return
	}
	entries := d.buf[:n]
	for i := 0; i < len(entries); i += 8 {
		lba, length := DecodeRange(entries[i:])
		if length != 0 && (lba >= d.info.Sectors || lba+uint64(length) > d.info.Sectors) {
			d.fail(max(lba, d.info.Sectors), ErrorIDNF|ErrorABRT, true)
			return
		}
	}
	var runLBA, runLen uint64
	for i := 0; i <= len(entries); i += 8 {
		var lba uint64
		var length uint16
		if i < len(entries) {
			lba, length = DecodeRange(entries[i:])
			if length == 0 {
				continue
			}
			if runLen != 0 && runLBA+runLen == lba {
				runLen += uint64(length)
				continue
			}
		}
		if runLen != 0 {
			sz := int64(d.sector)
			if err := d.trimmer.Trim(d.ctx, int64(runLBA)*sz, int64(runLen)*sz); err != nil {
				d.lastErr = err
				d.fail(runLBA, ErrorABRT, true)
				d.status |= StatusDF
				return
			}
		}
		runLBA, runLen = lba, uint64(length)
	}
	d.succeed()
}

// DecodeRange reads one 8-byte DATA SET MANAGEMENT range entry (ACS-3
// §7.5.3.2): LBA in bits 47:0, the number of sectors in bits 63:48, 0 for
// an unused entry. b must hold 8 bytes.
func DecodeRange(b []byte) (lba uint64, length uint16) {
	v := binary.LittleEndian.Uint64(b)
	return v & MaxLBA48, uint16(v >> 48)
}

// PutRange writes one range entry into b[:8].
func PutRange(b []byte, lba uint64, length uint16) {
	binary.LittleEndian.PutUint64(b, lba&MaxLBA48|uint64(length)<<48)
}

// succeed ends the command with DRDY|DSC and an interrupt.
func (d *Device) succeed() {
	d.step(EvComplete)
	d.status = StatusDRDY | StatusDSC
	d.errReg = 0
	d.raise()
}

// abort ends the command with DRDY|ERR, ABRT and an interrupt.
func (d *Device) abort() { d.fail(0, ErrorABRT, false) }

// fail ends the command with DRDY|ERR and e, the failing LBA in the LBA
// registers if withLBA, and an interrupt.
func (d *Device) fail(lba uint64, e ErrorBits, withLBA bool) {
	if withLBA {
		d.setLBA(lba, d.cmd.Addressing)
	}
	d.step(EvComplete)
	d.status = StatusDRDY | StatusERR
	d.errReg = e
	d.pos, d.end = 0, 0
	d.raise()
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
