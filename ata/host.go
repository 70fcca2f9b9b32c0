package ata

import "errors"

// Port is one ATA device's registers as a host reaches them. *Device
// implements it; so can a wrapper around real hardware or a remote device.
//
// A Port is driven by one host at a time, like the register block of a
// real channel: an implementation need not be safe for concurrent use,
// and Host calls its methods only from the goroutine running Exec (or
// another Host method). Sharing a Port between goroutines takes the
// caller's own locking around whole commands.
type Port interface {
	ReadReg(r Reg) uint8
	WriteReg(r Reg, v uint8)
	ReadData16() uint16
	WriteData16(v uint16)
	ReadData32() uint32
	WriteData32(v uint32)
	// INTRQ reports whether the device asserts its interrupt line.
	INTRQ() bool
}

// Host is the minimal host-side driver a test or an example needs: it
// issues any command through the registers, by PIO or by DMA, following
// Linux libata's sequence (ata_sff_dev_select, ata_sff_tf_load,
// ata_sff_exec_command, the HSM of ata_sff_hsm_move): wait for !BSY,
// select the device, write the task file (HOB bytes first for a 48-bit
// command), write the command, wait for INTRQ (or poll with nIEN set),
// move each DRQ block through the data register, and check the status.
//
// A Host is not safe for concurrent use. Attach makes one; a Host built
// by hand needs a Port, and Identify to learn the device.
type Host struct {
	Port Port
	// BusMaster points the DMA engine at the buffer of a DMA command.
	BusMaster BusMaster
	// Geometry translates CHS commands: Identify sets it from the
	// device's current translation, and Exec after a successful
	// INITIALIZE DEVICE PARAMETERS.
	Geometry Geometry
	// Data32 moves PIO data with 32-bit data register accesses.
	Data32 bool
	// Polling sets nIEN and polls the status register instead of waiting
	// for INTRQ.
	Polling bool
	// MaxPolls bounds each wait in status reads; 0 means 1<<16.
	MaxPolls int
	// SectorSize is the logical sector size; 0 means 512. Identify sets
	// it.
	SectorSize int
	// Sectors is the device's capacity, for INITIALIZE DEVICE PARAMETERS;
	// Attach and Identify set it.
	Sectors uint64
	// Mode is the command family ReadAt and WriteAt use (RWPIO by
	// default); FUA makes WriteAt use the FUA opcodes (RWDMA or
	// RWPIOMultiple only).
	Mode RWMode
	FUA  bool
	// Multiple is the DRQ block of READ/WRITE MULTIPLE in sectors, as
	// libata keeps it; Identify reads it from word 59 and a successful SET
	// MULTIPLE MODE through Exec updates it.
	Multiple uint8

	ctl     Control
	ctlSet  bool
	lastCmd Command
}

// Attach returns a host driver for the device behind p, with bm (may be
// nil) as bus master, once it has read the device's IDENTIFY DEVICE data
// (Host.Identify): the capacity, sector size, multiple count and CHS
// translation come from the device, as a real host learns them. It
// returns the IDENTIFY data too; an error is the failed IDENTIFY's.
func Attach(p Port, bm BusMaster) (*Host, Identify, error) {
	h := &Host{Port: p, BusMaster: bm}
	id, err := h.Identify()
	if err != nil {
		return nil, id, err
	}
	return h, id, nil
}

// NewHost returns a host driver for p, a device of the given capacity in
// sectors (its DefaultGeometry), with bm (may be nil) as bus master,
// without asking the device anything.
//
// Deprecated: use Attach, which learns the capacity (and the sector size
// and multiple count) from IDENTIFY DEVICE instead of being told it again.
func NewHost(p Port, sectors uint64, bm BusMaster) *Host {
	return &Host{Port: p, BusMaster: bm, Geometry: DefaultGeometry(sectors), Sectors: sectors}
}

func (h *Host) sectorSize() int {
	if h.SectorSize == 0 {
		return 512
	}
	return h.SectorSize
}

func (h *Host) maxPolls() int {
	if h.MaxPolls <= 0 {
		return 1 << 16
	}
	return h.MaxPolls
}

// control writes the device control register when it changes (libata
// writes ap->ctl the same way, with the obsolete bit 3 set).
func (h *Host) control() {
	c := ControlObsolete
	if h.Polling {
		c |= ControlNIEN
	}
	if !h.ctlSet || c != h.ctl {
		h.Port.WriteReg(RegDeviceControl, uint8(c))
		h.ctl, h.ctlSet = c, true
	}
}

// waitIdle polls the alternate status until BSY and DRQ are clear.
func (h *Host) waitIdle() (Status, error) {
	for range h.maxPolls() {
		st := Status(h.Port.ReadReg(RegAltStatus))
		if st&(StatusBSY|StatusDRQ) == 0 {
			return st, nil
		}
	}
	return 0, ErrTimeout
}

// waitNotBusy polls the alternate status until BSY is clear.
func (h *Host) waitNotBusy() (Status, error) {
	for range h.maxPolls() {
		st := Status(h.Port.ReadReg(RegAltStatus))
		if st&StatusBSY == 0 {
			return st, nil
		}
	}
	return 0, ErrTimeout
}

// waitIRQ waits for the device's interrupt (or, polling, for !BSY) and
// reads the status register, which acknowledges the interrupt.
func (h *Host) waitIRQ() (Status, error) {
	if h.Polling {
		if _, err := h.waitNotBusy(); err != nil {
			return 0, err
		}
		return Status(h.Port.ReadReg(RegStatus)), nil
	}
	for range h.maxPolls() {
		if h.Port.INTRQ() {
			return Status(h.Port.ReadReg(RegStatus)), nil
		}
	}
	return 0, ErrTimeout
}

// Exec runs c through the registers. buf is the data phase: exactly
// c.Bytes(SectorSize) bytes for a data command (read into or written
// from), ignored for a non-data command. A command the device ends in
// error returns an *Error (errors.Is matches ErrAborted, ErrIDNotFound,
// ErrUncorrectable, ErrDeviceFault); ErrTimeout and ErrProtocol report a
// device that does not follow the protocol. The output registers
// (a power mode, a native max address) can be read with ReadTaskFile.
// For a DMA command buf goes to BusMaster.Prepare, and the engine may
// keep it after Exec returns (see BusMaster).
//
// Each *Error is new, the caller's to keep: a command the device ends in
// error costs one allocation. ExecErr reports it in the caller's Error
// instead.
func (h *Host) Exec(c *Command, buf []byte) error {
	return h.ExecErr(c, buf, nil)
}

// ExecErr is Exec with the caller's Error: a command the device ends in
// error fills *e (Op, Status, Err, LBA, as Exec's *Error would hold them)
// and returns e itself, so errors.Is and errors.As work as on Exec's
// error and a stream of failing commands allocates nothing. It writes *e
// only when it returns e: success, and an error the device did not end
// the command with (ErrTimeout, ErrProtocol, ErrBufferSize ...), leave
// *e as it was. With a nil e, ExecErr allocates a new Error, as Exec
// does.
//
// The returned error is e, the caller's memory: it is valid until e is
// next passed to ExecErr, which overwrites it, so a caller that keeps the
// error longer keeps a copy of *e. Like the Host, e is used by one
// goroutine at a time: Hosts driven concurrently need an Error each.
func (h *Host) ExecErr(c *Command, buf []byte, e *Error) error {
	var tf TaskFile
	if err := c.Encode(h.Geometry, &tf); err != nil {
		return err
	}
	n := c.Bytes(h.sectorSize())
	if c.Protocol() != ProtocolNonData && int64(len(buf)) != n {
		return ErrBufferSize
	}
	h.lastCmd = *c
	h.control()
	if _, err := h.waitIdle(); err != nil {
		return err
	}
	h.Port.WriteReg(RegDevice, uint8(tf.Device))
	if _, err := h.waitIdle(); err != nil {
		return err
	}
	if c.Op.Ext() {
		h.Port.WriteReg(RegFeatures, tf.HOBFeatures)
		h.Port.WriteReg(RegCount, tf.HOBCount)
		h.Port.WriteReg(RegLBALow, tf.HOBLBALow)
		h.Port.WriteReg(RegLBAMid, tf.HOBLBAMid)
		h.Port.WriteReg(RegLBAHigh, tf.HOBLBAHigh)
	}
	h.Port.WriteReg(RegFeatures, tf.Features)
	h.Port.WriteReg(RegCount, tf.Count)
	h.Port.WriteReg(RegLBALow, tf.LBALow)
	h.Port.WriteReg(RegLBAMid, tf.LBAMid)
	h.Port.WriteReg(RegLBAHigh, tf.LBAHigh)
	h.Port.WriteReg(RegDevice, uint8(tf.Device))

	var st Status
	var err error
	switch c.Protocol() {
	case ProtocolDMA:
		if h.BusMaster == nil {
			return ErrNoBusMaster
		}
		if err := h.BusMaster.Prepare(buf); err != nil {
			return err
		}
		h.Port.WriteReg(RegCommand, uint8(c.Op))
		st, err = h.waitIRQ()
	case ProtocolPIOIn:
		h.Port.WriteReg(RegCommand, uint8(c.Op))
		st, err = h.pioIn(c, buf)
	case ProtocolPIOOut:
		h.Port.WriteReg(RegCommand, uint8(c.Op))
		st, err = h.pioOut(c, buf)
	default:
		h.Port.WriteReg(RegCommand, uint8(c.Op))
		st, err = h.waitIRQ()
	}
	if err != nil {
		return err
	}
	return h.check(c, st, e)
}

// block returns the bytes of the next DRQ block with left bytes to go.
func (h *Host) block(c *Command, left int) int {
	ss := h.sectorSize()
	switch {
	case c.Op == CmdIdentifyDevice:
		return IdentifySize
	case c.Op.Multiple() && h.Multiple > 0:
		return min(left, int(h.Multiple)*ss)
	}
	return min(left, ss)
}

func (h *Host) pioIn(c *Command, buf []byte) (Status, error) {
	for pos := 0; pos < len(buf); {
		st, err := h.waitIRQ()
		if err != nil {
			return 0, err
		}
		if st&(StatusERR|StatusDF) != 0 {
			return st, nil
		}
		if st&StatusDRQ == 0 {
			return st, ErrProtocol
		}
		n := h.block(c, len(buf)-pos)
		h.readBlock(buf[pos : pos+n])
		pos += n
	}
	// The last block ends without an interrupt: check the alternate
	// status, then the status register.
	if _, err := h.waitNotBusy(); err != nil {
		return 0, err
	}
	return Status(h.Port.ReadReg(RegStatus)), nil
}

func (h *Host) pioOut(c *Command, buf []byte) (Status, error) {
	// The first block is requested without an interrupt.
	st, err := h.waitNotBusy()
	if err != nil {
		return 0, err
	}
	for pos := 0; pos < len(buf); {
		if st&(StatusERR|StatusDF) != 0 {
			return Status(h.Port.ReadReg(RegStatus)), nil
		}
		if st&StatusDRQ == 0 {
			return st, ErrProtocol
		}
		n := h.block(c, len(buf)-pos)
		h.writeBlock(buf[pos : pos+n])
		pos += n
		if st, err = h.waitIRQ(); err != nil {
			return 0, err
		}
	}
	return st, nil
}

func (h *Host) readBlock(b []byte) {
	i := 0
	if h.Data32 {
		for ; i+4 <= len(b); i += 4 {
			v := h.Port.ReadData32()
			b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
	}
	for ; i+2 <= len(b); i += 2 {
		v := h.Port.ReadData16()
		b[i], b[i+1] = byte(v), byte(v>>8)
	}
}

func (h *Host) writeBlock(b []byte) {
	i := 0
	if h.Data32 {
		for ; i+4 <= len(b); i += 4 {
			h.Port.WriteData32(uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24)
		}
	}
	for ; i+2 <= len(b); i += 2 {
		h.Port.WriteData16(uint16(b[i]) | uint16(b[i+1])<<8)
	}
}

// check turns the final status into the result of the command, the way
// libata's ata_ok and ata_sff_tf_read do. A command the device ended in
// error is reported in e (a new Error if e is nil), and e returned.
func (h *Host) check(c *Command, st Status, e *Error) error {
	if st&(StatusERR|StatusDF) != 0 {
		if e == nil {
			e = new(Error)
		}
		*e = Error{Op: c.Op, Status: st, Err: ErrorBits(h.Port.ReadReg(RegError))}
		out := h.ReadTaskFile(c.Addressing == AddrLBA48)
		switch c.Addressing {
		case AddrLBA48:
			e.LBA = out.lba48()
		case AddrCHS:
			cyl := uint16(out.LBAMid) | uint16(out.LBAHigh)<<8
			e.LBA, _ = h.Geometry.LBA(cyl, out.Device.Head(), out.LBALow)
		default:
			e.LBA = out.lba24() | uint64(out.Device.Head())<<24
		}
		return e
	}
	if !st.OK() {
		return ErrProtocol
	}
	switch c.Op {
	case CmdSetMultipleMode:
		h.Multiple = uint8(c.Count)
	case CmdInitializeDeviceParams:
		h.Geometry = TranslatedGeometry(h.Sectors, c.Device.Head()+1, uint8(c.Count))
	}
	return nil
}

// ReadTaskFile reads the output registers: count, LBA and device, and with
// hob also their HOB bytes (by setting HOB in the device control register
// and clearing it again).
func (h *Host) ReadTaskFile(hob bool) TaskFile {
	tf := TaskFile{
		Count:   h.Port.ReadReg(RegCount),
		LBALow:  h.Port.ReadReg(RegLBALow),
		LBAMid:  h.Port.ReadReg(RegLBAMid),
		LBAHigh: h.Port.ReadReg(RegLBAHigh),
		Device:  DeviceBits(h.Port.ReadReg(RegDevice)),
	}
	if hob {
		h.Port.WriteReg(RegDeviceControl, uint8(h.ctl|ControlHOB))
		tf.HOBCount = h.Port.ReadReg(RegCount)
		tf.HOBLBALow = h.Port.ReadReg(RegLBALow)
		tf.HOBLBAMid = h.Port.ReadReg(RegLBAMid)
		tf.HOBLBAHigh = h.Port.ReadReg(RegLBAHigh)
		h.Port.WriteReg(RegDeviceControl, uint8(h.ctl))
	}
	return tf
}

// Identify reads IDENTIFY DEVICE by PIO, checks its checksum, and sets
// SectorSize, Sectors, Multiple and Geometry from it.
func (h *Host) Identify() (Identify, error) {
	var b [IdentifySize]byte
	c := Command{Op: CmdIdentifyDevice}
	if err := h.Exec(&c, b[:]); err != nil {
		return Identify{}, err
	}
	id, err := ParseIdentify(b[:])
	if err != nil {
		return id, err
	}
	h.SectorSize = id.LogicalSectorSize()
	h.Sectors = id.Sectors()
	h.Multiple = id.Multiple()
	h.Geometry = id.CurrentGeometry()
	return id, nil
}

// Signature is what the task file holds after a reset or EXECUTE DEVICE
// DIAGNOSTIC: the device class signature and the diagnostic code.
type Signature struct {
	Count, LBALow, LBAMid, LBAHigh uint8
	Diagnostic                     uint8
}

// ATA reports whether s is the signature of an ATA (non-packet) device:
// count 1, LBA low 1, LBA mid/high 00h/00h.
func (s Signature) ATA() bool {
	return s.Count == 1 && s.LBALow == 1 && s.LBAMid == 0 && s.LBAHigh == 0
}

// SoftReset pulses SRST (libata ata_sff_softreset: SRST set, then
// cleared, then wait for !BSY) and returns the signature and diagnostic
// code the device leaves in its registers.
func (h *Host) SoftReset() (Signature, error) {
	h.control()
	h.Port.WriteReg(RegDeviceControl, uint8(h.ctl|ControlSRST))
	h.Port.WriteReg(RegDeviceControl, uint8(h.ctl))
	if _, err := h.waitNotBusy(); err != nil {
		return Signature{}, err
	}
	h.Port.WriteReg(RegDevice, 0)
	s := Signature{
		Count:      h.Port.ReadReg(RegCount),
		LBALow:     h.Port.ReadReg(RegLBALow),
		LBAMid:     h.Port.ReadReg(RegLBAMid),
		LBAHigh:    h.Port.ReadReg(RegLBAHigh),
		Diagnostic: h.Port.ReadReg(RegError),
	}
	return s, nil
}

// ReadNativeMax runs READ NATIVE MAX ADDRESS (EXT when ext) and returns the
// highest LBA the device reports.
func (h *Host) ReadNativeMax(ext bool) (uint64, error) {
	c := Command{Op: CmdReadNativeMaxAddress, Device: DeviceLBA}
	if ext {
		c = Command{Op: CmdReadNativeMaxAddressExt, Device: DeviceLBA}
	}
	if err := h.Exec(&c, nil); err != nil {
		return 0, err
	}
	out := h.ReadTaskFile(ext)
	if ext {
		return out.lba48(), nil
	}
	return out.lba24() | uint64(out.Device.Head())<<24, nil
}

// CheckPowerMode runs CHECK POWER MODE and returns the sector count it
// reports (PowerActive or PowerStandby).
func (h *Host) CheckPowerMode() (uint8, error) {
	c := Command{Op: CmdCheckPowerMode}
	if err := h.Exec(&c, nil); err != nil {
		return 0, err
	}
	return h.Port.ReadReg(RegCount), nil
}

// RWMode selects the opcode family ReadWrite picks.
type RWMode uint8

// Read/write modes.
const (
	RWPIO         RWMode = iota // READ/WRITE SECTORS (EXT)
	RWPIOMultiple               // READ/WRITE MULTIPLE (EXT)
	RWDMA                       // READ/WRITE DMA (EXT)
)

// ReadWrite builds a read or write of n sectors at lba the way libata's
// ata_build_rw_tf does: a 28-bit command when lba+n < 2^28-1 and n <= 256,
// else the EXT command; FUA always takes the 48-bit FUA opcode, which
// exists for DMA and PIO multiple only (ErrOutOfRange otherwise, and for n
// outside 1-65536 or an LBA beyond 48 bits).
func ReadWrite(write bool, lba uint64, n uint32, mode RWMode, fua bool) (Command, error) {
	if n == 0 || n > 65536 || lba+uint64(n) > MaxLBA48+1 {
		return Command{}, ErrOutOfRange
	}
	lba28 := lba+uint64(n) < MaxLBA28 && n <= 256 && !fua
	var op Opcode
	switch {
	case fua && !write, fua && mode == RWPIO:
		return Command{}, ErrOutOfRange
	case fua && mode == RWDMA:
		op = CmdWriteDMAFUAExt
	case fua:
		op = CmdWriteMultipleFUAExt
	default:
		table := [2][3][2]Opcode{
			{{CmdReadSectors, CmdReadSectorsExt}, {CmdReadMultiple, CmdReadMultipleExt}, {CmdReadDMA, CmdReadDMAExt}},
			{{CmdWriteSectors, CmdWriteSectorsExt}, {CmdWriteMultiple, CmdWriteMultipleExt}, {CmdWriteDMA, CmdWriteDMAExt}},
		}
		w, e := 0, 1
		if write {
			w = 1
		}
		if lba28 {
			e = 0
		}
		if mode > RWDMA {
			return Command{}, ErrOutOfRange
		}
		op = table[w][mode][e]
	}
	c := Command{Op: op, LBA: lba, Count: n, Addressing: AddrLBA48}
	if !op.Ext() {
		c.Addressing = AddrLBA28
	}
	return c, nil
}

// ErrUnaligned is returned by Host.ReadAt and WriteAt for an offset or
// length that is not a multiple of the sector size.
var ErrUnaligned = errors.New("ata: offset or length not a multiple of the sector size")

// maxPerCommand is the most sectors ReadAt and WriteAt put in one command:
// libata's cap of 65535 for 48-bit counts, rounded down to 64 KiB-aligned
// 128-sector units.
const maxPerCommand = 65535 &^ 127

// ReadAt reads len(p) bytes at off through ATA read commands of h.Mode
// (libata's choice of 28- or 48-bit opcode), so a device can be used as an
// io.ReaderAt from the host side. off and len(p) must be multiples of the
// sector size. It returns the bytes read before the first failing command.
func (h *Host) ReadAt(p []byte, off int64) (int, error) {
	return h.rw(false, p, off)
}

// WriteAt writes p at off through ATA write commands of h.Mode (FUA when
// h.FUA is set), like ReadAt.
func (h *Host) WriteAt(p []byte, off int64) (int, error) {
	return h.rw(true, p, off)
}

// Flush runs FLUSH CACHE EXT.
func (h *Host) Flush() error {
	c := Command{Op: CmdFlushCacheExt, Device: DeviceLBA}
	return h.Exec(&c, nil)
}

func (h *Host) rw(write bool, p []byte, off int64) (int, error) {
	ss := int64(h.sectorSize())
	if off < 0 || off%ss != 0 || int64(len(p))%ss != 0 {
		return 0, ErrUnaligned
	}
	done := 0
	for done < len(p) {
		n := min(int64(len(p)-done)/ss, maxPerCommand)
		c, err := ReadWrite(write, uint64(off/ss), uint32(n), h.Mode, write && h.FUA)
		if err != nil {
			return done, err
		}
		if err := h.Exec(&c, p[done:done+int(n*ss)]); err != nil {
			return done, err
		}
		done += int(n * ss)
		off += n * ss
	}
	return done, nil
}
