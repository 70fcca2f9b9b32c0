package ata_test

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
	"pgregory.net/rapid"
)

// diskModel is what a correct device must look like from the host: the
// sectors, the settings commands change, and the flush count. It is
// written from the ATA rules, not from the device's code.
type diskModel struct {
	sectors    uint64
	data       []byte
	writeCache bool
	multiple   uint8
	dmaMode    uint8
	geom       ata.Geometry
	standby    bool
	flushes    int
}

const machineSectors = 600

type machine struct {
	t   *rapid.T
	r   *rig
	m   diskModel
	rng *rand.Rand
}

func newMachine(t *rapid.T) *machine {
	info := testInfo(machineSectors)
	r := newRig(t, info)
	mc := &machine{t: t, r: r, rng: rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))}
	mc.m = diskModel{
		sectors: machineSectors, data: make([]byte, machineSectors*512), writeCache: true,
		multiple: 16, dmaMode: ata.XferUDMA0 + 6, geom: ata.DefaultGeometry(machineSectors),
	}
	for _, s := range rapid.SliceOfNDistinct(rapid.Int64Range(0, machineSectors-1), 0, 2, rapid.ID[int64]).Draw(t, "badRead") {
		r.disk.badRead[s] = true
	}
	for _, s := range rapid.SliceOfNDistinct(rapid.Int64Range(0, machineSectors-1), 0, 2, rapid.ID[int64]).Draw(t, "badWrite") {
		r.disk.badWrite[s] = true
	}
	// Start from non-zero contents so that reads are checked byte by byte.
	for i := range mc.m.data {
		mc.m.data[i] = byte(mc.rng.Uint32())
	}
	copy(r.disk.data, mc.m.data)
	return mc
}

// touch applies the power-mode rule: every command but the standby ones
// and CHECK POWER MODE brings the device back to active.
func (mc *machine) touch(op ata.Opcode) {
	switch op {
	case ata.CmdStandby, ata.CmdStandbyImmediate, ata.CmdSleep, ata.CmdCheckPowerMode, ata.CmdCheckPowerModeAlt:
	default:
		mc.m.standby = false
	}
}

// expect compares the result of a command with the model's.
func (mc *machine) expect(what string, got error, want *ata.Error) {
	mc.t.Helper()
	if want == nil {
		if got != nil {
			mc.t.Fatalf("%s: %v, want success", what, got)
		}
		return
	}
	e := ataErr(mc.t, got)
	if diff := cmp.Diff(want, e); diff != "" {
		mc.t.Fatalf("%s: error (-want +got):\n%s", what, diff)
	}
}

func (mc *machine) check() {
	t := mc.t
	d := mc.r.dev
	if err := d.Fault(); err != nil {
		t.Fatalf("device fault: %v", err)
	}
	if d.State() != ata.StateIdle {
		t.Fatalf("state %v after the command, want idle", d.State())
	}
	if st := d.Status(); st&(ata.StatusBSY|ata.StatusDRQ) != 0 || st&ata.StatusDRDY == 0 {
		t.Fatalf("status %v after the command", st)
	}
	if !bytes.Equal(mc.r.disk.data, mc.m.data) {
		for i := range mc.m.data {
			if mc.r.disk.data[i] != mc.m.data[i] {
				t.Fatalf("disk differs from the model first at byte %d (sector %d)", i, i/512)
			}
		}
	}
	if mc.r.disk.flushes != mc.m.flushes {
		t.Fatalf("%d flushes, model %d", mc.r.disk.flushes, mc.m.flushes)
	}
}

func (mc *machine) firstBad(bad map[int64]bool, lba uint64, n uint32) (uint64, bool) {
	for s := lba; s < lba+uint64(n); s++ {
		if bad[int64(s)] {
			return s, true
		}
	}
	return 0, false
}

var rwOps = [2][3][2]ata.Opcode{
	{{ata.CmdReadSectors, ata.CmdReadSectorsExt}, {ata.CmdReadMultiple, ata.CmdReadMultipleExt}, {ata.CmdReadDMA, ata.CmdReadDMAExt}},
	{{ata.CmdWriteSectors, ata.CmdWriteSectorsExt}, {ata.CmdWriteMultiple, ata.CmdWriteMultipleExt}, {ata.CmdWriteDMA, ata.CmdWriteDMAExt}},
}

// drawRW draws a read or write command, sometimes addressed by CHS,
// sometimes past the end.
func (mc *machine) drawRW(t *rapid.T, write bool) ata.Command {
	mode := rapid.IntRange(0, 2).Draw(t, "mode")
	fua := write && mode > 0 && rapid.IntRange(0, 3).Draw(t, "fua") == 0
	ext := fua || rapid.Bool().Draw(t, "ext")
	chs := !ext && rapid.IntRange(0, 4).Draw(t, "chs") == 0
	maxN := 256
	if ext {
		maxN = 300
	}
	n := uint32(rapid.IntRange(1, maxN).Draw(t, "n"))
	w := 0
	if write {
		w = 1
	}
	e := 0
	if ext {
		e = 1
	}
	c := ata.Command{Op: rwOps[w][mode][e], Count: n, Addressing: ata.AddrLBA28}
	switch {
	case fua && mode == 2:
		c.Op = ata.CmdWriteDMAFUAExt
	case fua:
		c.Op = ata.CmdWriteMultipleFUAExt
	}
	if ext {
		c.Addressing = ata.AddrLBA48
	}
	if chs {
		c.Addressing = ata.AddrCHS
		c.LBA = uint64(rapid.IntRange(0, int(mc.m.geom.Sectors())-1).Draw(t, "chsLBA"))
		return c
	}
	switch rapid.IntRange(0, 9).Draw(t, "where") {
	case 2, 3:
		// Ending exactly at the end of the disk, or one past it.
		c.LBA = uint64(machineSectors-int(min(n, machineSectors))) + uint64(rapid.IntRange(0, 1).Draw(t, "overshoot"))
	case 0:
		c.LBA = uint64(rapid.IntRange(machineSectors, machineSectors+100).Draw(t, "past"))
	case 1:
		if ext {
			c.LBA = rapid.Uint64Range(1<<28, ata.MaxLBA48-uint64(n)+1).Draw(t, "far")
		} else {
			c.LBA = rapid.Uint64Range(machineSectors, ata.MaxLBA28-uint64(n)+1).Draw(t, "far")
		}
	default:
		c.LBA = uint64(rapid.IntRange(0, machineSectors-1).Draw(t, "lba"))
	}
	return c
}

// blocks is the number of DRQ blocks of a PIO command.
func (mc *machine) blocks(c *ata.Command) int {
	per := uint32(1)
	if c.Op.Multiple() {
		per = uint32(mc.m.multiple)
	}
	return int((c.Count + per - 1) / per)
}

// rangeErr is the model's answer to a command's address: nil when it fits.
// In CHS mode a failing LBA the geometry cannot express leaves the
// registers as the host wrote them.
func (mc *machine) rangeErr(c *ata.Command) *ata.Error {
	fail := c.LBA
	switch {
	case c.LBA >= mc.m.sectors:
	case c.LBA+uint64(c.Count) > mc.m.sectors:
		fail = mc.m.sectors
	default:
		return nil
	}
	return &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorIDNF | ata.ErrorABRT, LBA: mc.reported(c, fail)}
}

// reported is the LBA the registers show for a failure at lba: in CHS
// mode one the geometry cannot express leaves them as the host wrote
// them (the command's first LBA).
func (mc *machine) reported(c *ata.Command, lba uint64) uint64 {
	if c.Addressing == ata.AddrCHS && lba >= mc.m.geom.Sectors() {
		return c.LBA
	}
	return lba
}

func abrt(c *ata.Command, lba uint64) *ata.Error {
	return &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorABRT, LBA: lba}
}

func (mc *machine) read(t *rapid.T) {
	c := mc.drawRW(t, false)
	buf := make([]byte, int(c.Count)*512)
	irqs := mc.r.irqs
	polling := mc.r.host.Polling
	err := mc.r.host.Exec(&c, buf)
	mc.touch(c.Op)
	want := mc.rangeErr(&c)
	if want == nil && c.Op.Multiple() && mc.m.multiple == 0 {
		want = abrt(&c, c.LBA)
	}
	if want == nil {
		if s, bad := mc.firstBad(mc.r.disk.badRead, c.LBA, c.Count); bad {
			want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorUNC, LBA: mc.reported(&c, s)}
		}
	}
	mc.expect(c.Name(), err, want)
	if want == nil && !polling {
		// PIO in: one interrupt per DRQ block, none at the end; DMA: one.
		wantIRQ := 1
		if c.Protocol() == ata.ProtocolPIOIn {
			wantIRQ = mc.blocks(&c)
		}
		if got := mc.r.irqs - irqs; got != wantIRQ {
			t.Fatalf("%s of %d sectors raised %d interrupts, want %d", c.Name(), c.Count, got, wantIRQ)
		}
	}
	if want == nil && !bytes.Equal(buf, mc.m.data[c.LBA*512:(c.LBA+uint64(c.Count))*512]) {
		t.Fatalf("%s LBA %d count %d: data differs from the model", c.Name(), c.LBA, c.Count)
	}
}

func (mc *machine) write(t *rapid.T) {
	c := mc.drawRW(t, true)
	buf := make([]byte, int(c.Count)*512)
	for i := range buf {
		buf[i] = byte(mc.rng.Uint32())
	}
	irqs := mc.r.irqs
	polling := mc.r.host.Polling
	err := mc.r.host.Exec(&c, buf)
	mc.touch(c.Op)
	want := mc.rangeErr(&c)
	if want == nil && c.Op.Multiple() && mc.m.multiple == 0 {
		want = abrt(&c, c.LBA)
	}
	if want == nil && !polling && c.Protocol() == ata.ProtocolPIOOut && err == nil {
		// PIO out: an interrupt after each block (the first block is
		// requested without one).
		if got := mc.r.irqs - irqs; got != mc.blocks(&c) {
			t.Fatalf("%s of %d sectors raised %d interrupts, want %d", c.Name(), c.Count, got, mc.blocks(&c))
		}
	}
	if want == nil {
		end := c.LBA + uint64(c.Count)
		if s, bad := mc.firstBad(mc.r.disk.badWrite, c.LBA, c.Count); bad {
			end = s
			want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT, LBA: mc.reported(&c, s)}
		}
		copy(mc.m.data[c.LBA*512:end*512], buf)
		if want == nil && (c.FUA() || !mc.m.writeCache) {
			mc.m.flushes++
			if mc.r.disk.failFlush {
				want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT, LBA: c.LBA}
			}
		}
	}
	mc.expect(c.Name(), err, want)
}

func (mc *machine) flush(t *rapid.T) {
	c := ata.Command{Op: ata.CmdFlushCache}
	if rapid.Bool().Draw(t, "ext") {
		c.Op = ata.CmdFlushCacheExt
	}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(c.Op)
	mc.m.flushes++
	var want *ata.Error
	if mc.r.disk.failFlush {
		want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT}
	}
	mc.expect(c.Name(), err, want)
}

func (mc *machine) trim(t *rapid.T) {
	blocks := rapid.IntRange(1, 2).Draw(t, "blocks")
	buf := make([]byte, blocks*512)
	entries := rapid.IntRange(0, 4).Draw(t, "entries")
	var want *ata.Error
	type rng struct{ lba, n uint64 }
	var ranges []rng
	c := ata.Command{Op: ata.CmdDataSetManagement, Features: ata.DSMTrim, Count: uint32(blocks), Device: ata.DeviceLBA}
	for i := range entries {
		lba := uint64(rapid.IntRange(0, machineSectors+20).Draw(t, "trimLBA"))
		n := uint64(rapid.IntRange(0, 64).Draw(t, "trimLen"))
		slot := rapid.IntRange(0, blocks*64-1).Draw(t, "slot")
		_ = i
		// Later draws may overwrite an earlier slot; read back what is there.
		ata.PutRange(buf[slot*8:], lba, uint16(n))
	}
	for i := 0; i < len(buf); i += 8 {
		lba, n := ata.DecodeRange(buf[i:])
		if n == 0 {
			continue
		}
		if want == nil && (lba >= mc.m.sectors || lba+uint64(n) > mc.m.sectors) {
			want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorIDNF | ata.ErrorABRT, LBA: max(lba, mc.m.sectors)}
		}
		ranges = append(ranges, rng{lba, uint64(n)})
	}
	err := mc.r.host.Exec(&c, buf)
	mc.touch(c.Op)
	if want == nil {
		for _, r := range ranges {
			clear(mc.m.data[r.lba*512 : (r.lba+r.n)*512])
		}
	}
	mc.expect("TRIM", err, want)
}

func (mc *machine) identify(t *rapid.T) {
	id, err := mc.r.host.Identify()
	mc.touch(ata.CmdIdentifyDevice)
	if err != nil {
		t.Fatalf("IDENTIFY: %v", err)
	}
	m := &mc.m
	sel := func(mode uint8, class uint8) uint16 {
		if mode&^7 != class {
			return 0
		}
		return 0x100 << (mode & 7)
	}
	wc := uint16(0)
	if m.writeCache {
		wc = 0x20
	}
	want := map[int]uint16{
		54: m.geom.Cylinders, 55: uint16(m.geom.Heads), 56: uint16(m.geom.SectorsPerTrack),
		59: 0x100 | uint16(m.multiple),
		62: sel(m.dmaMode, ata.XferSWDMA0),
		63: 0x0007 | sel(m.dmaMode, ata.XferMWDMA0),
		88: 0x007F | sel(m.dmaMode, ata.XferUDMA0),
		85: 0x4009 | wc, // NOP, power management, SMART enabled
		60: machineSectors, 100: machineSectors,
	}
	for w, v := range want {
		if id[w] != v {
			t.Fatalf("IDENTIFY word %d = %04Xh, model %04Xh", w, id[w], v)
		}
	}
	if !id.ChecksumOK() || id.Model() != "NHD Test Disk" || id.Serial() != "SN-0001" {
		t.Fatalf("IDENTIFY checksum %v model %q serial %q", id.ChecksumOK(), id.Model(), id.Serial())
	}
}

func (mc *machine) setFeatures(t *rapid.T) {
	sub := rapid.SampledFrom([]uint16{ata.FeatureEnableWriteCache, ata.FeatureDisableWriteCache, ata.FeatureSetTransferMode, ata.FeatureSetTransferMode, 0x55, 0xAA, 0x66}).Draw(t, "sub")
	mode := uint8(rapid.SampledFrom([]int{0, 1, 2, 8, 11, 12, 13, 0x10, 0x12, 0x20, 0x22, 0x23, 0x40, 0x45, 0x46, 0x47, 0x80}).Draw(t, "mode"))
	c := ata.Command{Op: ata.CmdSetFeatures, Features: sub, Count: uint32(mode)}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(c.Op)
	var want *ata.Error
	m := &mc.m
	switch sub {
	case ata.FeatureEnableWriteCache:
		m.writeCache = true
	case ata.FeatureDisableWriteCache:
		m.flushes++
		if mc.r.disk.failFlush {
			want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT}
		} else {
			m.writeCache = false
		}
	case ata.FeatureSetTransferMode:
		n := mode & 7
		switch mode &^ 7 {
		case 0:
			if n > 1 {
				want = abrt(&c, 0)
			}
		case ata.XferPIO0:
			if n > 4 {
				want = abrt(&c, 0)
			}
		case ata.XferMWDMA0:
			if n > 2 {
				want = abrt(&c, 0)
			} else {
				m.dmaMode = mode
			}
		case ata.XferUDMA0:
			if n > 6 {
				want = abrt(&c, 0)
			} else {
				m.dmaMode = mode
			}
		default: // SWDMA is not advertised by testInfo
			want = abrt(&c, 0)
		}
	default:
		want = abrt(&c, 0)
	}
	mc.expect("SET FEATURES", err, want)
}

func (mc *machine) setMultiple(t *rapid.T) {
	n := uint8(rapid.SampledFrom([]int{0, 1, 2, 3, 4, 8, 16, 32, 128, 255}).Draw(t, "multiple"))
	c := ata.Command{Op: ata.CmdSetMultipleMode, Count: uint32(n)}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(c.Op)
	var want *ata.Error
	if n != 0 && (n > 16 || bits.OnesCount8(n) != 1) {
		want = abrt(&c, 0)
	} else {
		mc.m.multiple = n
	}
	mc.expect("SET MULTIPLE MODE", err, want)
	if err == nil && mc.r.host.Multiple != n {
		t.Fatalf("host multiple %d after SET MULTIPLE MODE %d", mc.r.host.Multiple, n)
	}
}

func (mc *machine) initParams(t *rapid.T) {
	heads := uint8(rapid.IntRange(1, 16).Draw(t, "heads"))
	spt := uint8(rapid.IntRange(0, 255).Draw(t, "spt"))
	c := ata.Command{Op: ata.CmdInitializeDeviceParams, Count: uint32(spt), Device: ata.DeviceBits(heads - 1)}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(c.Op)
	var want *ata.Error
	if spt == 0 {
		want = abrt(&c, uint64(heads-1)<<24)
	} else {
		cyl := uint64(machineSectors) / (uint64(heads) * uint64(spt))
		mc.m.geom = ata.Geometry{Cylinders: uint16(max(1, cyl)), Heads: heads, SectorsPerTrack: spt}
	}
	mc.expect("INITIALIZE DEVICE PARAMETERS", err, want)
}

func (mc *machine) power(t *rapid.T) {
	op := rapid.SampledFrom([]ata.Opcode{ata.CmdStandby, ata.CmdStandbyImmediate, ata.CmdSleep, ata.CmdIdle, ata.CmdIdleImmediate, ata.CmdCheckPowerMode, ata.CmdCheckPowerModeAlt}).Draw(t, "op")
	c := ata.Command{Op: op}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(op)
	mc.expect(op.String(), err, nil)
	switch op {
	case ata.CmdStandby, ata.CmdStandbyImmediate, ata.CmdSleep:
		mc.m.standby = true
	case ata.CmdCheckPowerMode, ata.CmdCheckPowerModeAlt:
		want := uint8(ata.PowerActive)
		if mc.m.standby {
			want = ata.PowerStandby
		}
		if got := mc.r.dev.ReadReg(ata.RegCount); got != want {
			t.Fatalf("CHECK POWER MODE count %02x, model %02x", got, want)
		}
	}
}

func (mc *machine) misc(t *rapid.T) {
	switch rapid.IntRange(0, 5).Draw(t, "misc") {
	case 0:
		ext := rapid.Bool().Draw(t, "ext")
		got, err := mc.r.host.ReadNativeMax(ext)
		mc.touch(ata.CmdReadNativeMaxAddress)
		if err != nil || got != machineSectors-1 {
			t.Fatalf("READ NATIVE MAX (ext %v) = %d, %v", ext, got, err)
		}
	case 1:
		c := ata.Command{Op: ata.CmdReadVerifySectorsExt, Addressing: ata.AddrLBA48,
			LBA: uint64(rapid.IntRange(0, machineSectors+10).Draw(t, "lba")), Count: uint32(rapid.IntRange(1, 100).Draw(t, "n"))}
		err := mc.r.host.Exec(&c, nil)
		mc.touch(c.Op)
		mc.expect(c.Name(), err, mc.rangeErr(&c))
	case 2:
		c := ata.Command{Op: ata.CmdSeek, Addressing: ata.AddrLBA28, LBA: uint64(rapid.IntRange(0, machineSectors+10).Draw(t, "lba"))}
		err := mc.r.host.Exec(&c, nil)
		mc.touch(c.Op)
		var want *ata.Error
		if c.LBA >= machineSectors {
			want = &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorIDNF | ata.ErrorABRT, LBA: c.LBA}
		}
		mc.expect("SEEK", err, want)
	case 3:
		c := ata.Command{Op: ata.CmdRecalibrate}
		mc.expect("RECALIBRATE", mc.r.host.Exec(&c, nil), nil)
		mc.touch(c.Op)
	case 4:
		c := ata.Command{Op: ata.CmdExecuteDeviceDiagnostic}
		err := mc.r.host.Exec(&c, nil)
		mc.touch(c.Op)
		mc.expect("EXECUTE DEVICE DIAGNOSTIC", err, nil)
		mc.checkSignature()
	case 5:
		sig, err := mc.r.host.SoftReset()
		if err != nil || !sig.ATA() || sig.Diagnostic != ata.DiagPassed {
			t.Fatalf("soft reset: %+v, %v", sig, err)
		}
		mc.checkSignature()
	}
}

func (mc *machine) checkSignature() {
	d := mc.r.dev
	got := [5]uint8{d.ReadReg(ata.RegCount), d.ReadReg(ata.RegLBALow), d.ReadReg(ata.RegLBAMid), d.ReadReg(ata.RegLBAHigh), d.ReadReg(ata.RegError)}
	if got != [5]uint8{1, 1, 0, 0, 1} {
		mc.t.Fatalf("signature/diagnostic registers % x, want 01 01 00 00 01", got)
	}
	if st := ata.Status(d.ReadReg(ata.RegAltStatus)); st != ata.StatusDRDY|ata.StatusDSC {
		mc.t.Fatalf("status after diagnostic %v", st)
	}
}

func (mc *machine) unsupported(t *rapid.T) {
	op := ata.Opcode(rapid.IntRange(0, 255).Filter(func(v int) bool {
		return !ata.Opcode(v).Supported() || v == int(ata.CmdNOP)
	}).Draw(t, "opcode"))
	c := ata.Command{Op: op, Features: uint16(rapid.IntRange(0, 255).Draw(t, "features"))}
	err := mc.r.host.Exec(&c, nil)
	mc.touch(op)
	mc.expect(op.String(), err, abrt(&c, 0))
}

// interrupted starts a PIO command through the raw registers, moves part of
// a block, tries to write the task file and a new command (which must be
// ignored while DRQ is set), then resets. Nothing may reach the backend.
func (mc *machine) interrupted(t *rapid.T) {
	d := mc.r.dev
	write := rapid.Bool().Draw(t, "write")
	op := ata.CmdReadSectors
	if write {
		op = ata.CmdWriteSectors
	}
	lba := uint8(rapid.IntRange(0, 200).Draw(t, "lba"))
	d.WriteReg(ata.RegDevice, 0xE0)
	d.WriteReg(ata.RegCount, 2)
	d.WriteReg(ata.RegLBALow, lba)
	d.WriteReg(ata.RegLBAMid, 0)
	d.WriteReg(ata.RegLBAHigh, 0)
	d.WriteReg(ata.RegCommand, uint8(op))
	mc.touch(op)
	if s, bad := mc.firstBad(mc.r.disk.badRead, uint64(lba), 1); !write && bad {
		_ = s
		// Read the status register, as a host does on an error: that
		// acknowledges the interrupt, which nIEN (set by a polling host)
		// may be holding back, so that it does not fire when the next
		// command's host clears nIEN.
		if st := ata.Status(d.ReadReg(ata.RegStatus)); st != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorUNC {
			t.Fatalf("read of bad sector: status %v error %v", st, d.Error())
		}
		return
	}
	if d.State() != map[bool]ata.State{false: ata.StatePIOIn, true: ata.StatePIOOut}[write] {
		t.Fatalf("state %v after %v", d.State(), op)
	}
	words := rapid.IntRange(0, 255).Draw(t, "words")
	for range words {
		if write {
			d.WriteData16(0xDEAD)
		} else {
			d.ReadData16()
		}
	}
	d.WriteReg(ata.RegLBALow, 0x77)
	d.WriteReg(ata.RegCommand, uint8(ata.CmdIdentifyDevice))
	if got := d.ReadReg(ata.RegLBALow); got != lba {
		t.Fatalf("LBA low written while DRQ: %02x, want %02x", got, lba)
	}
	if d.Command().Op != op || d.Status()&ata.StatusDRQ == 0 {
		t.Fatalf("command written while DRQ was taken: %v status %v", d.Command().Op, d.Status())
	}
	if _, err := mc.r.host.SoftReset(); err != nil {
		t.Fatal(err)
	}
}

func TestMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mc := newMachine(t)
		t.Repeat(map[string]func(*rapid.T){
			"read":        mc.read,
			"write":       mc.write,
			"flush":       mc.flush,
			"trim":        mc.trim,
			"identify":    mc.identify,
			"setFeatures": mc.setFeatures,
			"setMultiple": mc.setMultiple,
			"initParams":  mc.initParams,
			"power":       mc.power,
			"misc":        mc.misc,
			"unsupported": mc.unsupported,
			"interrupted": mc.interrupted,
			"failFlush": func(t *rapid.T) {
				mc.r.disk.failFlush = rapid.IntRange(0, 3).Draw(t, "failFlush") == 0
			},
			"hostMode": func(t *rapid.T) {
				mc.r.host.Polling = rapid.Bool().Draw(t, "polling")
				mc.r.host.Data32 = rapid.Bool().Draw(t, "data32")
			},
			"": func(*rapid.T) { mc.check() },
		})
	})
}
