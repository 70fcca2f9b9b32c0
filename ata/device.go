package ata

import (
	"context"
	"io"
)

// Config is what NewDevice needs.
type Config struct {
	// Info describes the device; it must pass Validate.
	Info DeviceInfo
	// Backend holds the sectors; see Backend for the optional methods.
	Backend Backend
	// DMA moves the data of DMA commands. Without one the device does no
	// DMA: IDENTIFY says so and DMA commands abort.
	DMA DMA
	// Context is passed to the backend's Flush and Trim, and to the Wait
	// of a request a DMA engine left in flight; nil means
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
	src     io.ReaderAt // the engine's view of the backend: &track, or a view of it (tracker.views)
	dst     io.WriterAt // likewise, for writes
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

// NewDevice returns a powered-on device in StateIdle with the ATA
// signature in its registers. It fails with ErrNoBackend; with an error
// wrapping ErrInfo for an invalid Info, or for one with more Sectors than
// the backend holds, where the backend can tell (a Sizer, or a regular
// file with a Stat method such as *os.File: the error names both sizes);
// and with ErrNoTrim for Info.TRIM over a backend without a Trim method or
// without a DMA engine (DATA SET MANAGEMENT is a DMA command).
func NewDevice(c Config) (*Device, error) {
	if c.Backend == nil {
		return nil, ErrNoBackend
	}
	if err := c.Info.Validate(); err != nil {
		return nil, err
	}
	if _, ok := c.Backend.(Trimmer); c.Info.TRIM && (!ok || c.DMA == nil) {
		return nil, ErrNoTrim
	}
	if err := checkSize(c.Backend, &c.Info); err != nil {
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
	d.src, d.dst = d.track.views(c.Backend)
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
// pending, nIEN is clear and this device (device 0) is selected; while
// the absent device 1 is selected the line is released (ATA-7: a device
// not selected keeps INTRQ in high impedance) and the pending interrupt
// shows again when device 0 is selected. Reading the status register
// clears it.
func (d *Device) INTRQ() bool { return d.intrq && d.ctl&ControlNIEN == 0 && d.selected() }

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
