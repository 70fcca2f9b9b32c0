package ata_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
)

// issue loads a command through the registers by hand.
func issue(d *ata.Device, c ata.Command) {
	var tf ata.TaskFile
	if err := c.Encode(ata.DefaultGeometry(1<<20), &tf); err != nil {
		panic(err)
	}
	d.Issue(&tf)
}

func TestCommandEndings(t *testing.T) {
	tests := []struct {
		name   string
		cmd    ata.Command
		status ata.Status
		err    ata.ErrorBits
	}{
		{"SMART without its key", ata.Command{Op: ata.CmdSMART, Features: 0xD8}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"unknown opcode", ata.Command{Op: 0x5A}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"NOP aborts", ata.Command{Op: ata.CmdNOP}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"SET FEATURES unknown subcommand", ata.Command{Op: ata.CmdSetFeatures, Features: 0x55}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"SET FEATURES PIO5", ata.Command{Op: ata.CmdSetFeatures, Features: 3, Count: 0x0D}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"SET FEATURES UDMA7", ata.Command{Op: ata.CmdSetFeatures, Features: 3, Count: 0x47}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"SET MULTIPLE 3", ata.Command{Op: ata.CmdSetMultipleMode, Count: 3}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"SET MULTIPLE 32 > max 16", ata.Command{Op: ata.CmdSetMultipleMode, Count: 32}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"INITIALIZE 0 sectors", ata.Command{Op: ata.CmdInitializeDeviceParams}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"DSM not TRIM", ata.Command{Op: ata.CmdDataSetManagement, Features: 2, Count: 1}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"DSM too many blocks", ata.Command{Op: ata.CmdDataSetManagement, Features: 1, Count: 9}, ata.StatusDRDY | ata.StatusERR, ata.ErrorABRT},
		{"READ DMA EXT past end", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 4096, Count: 1}, ata.StatusDRDY | ata.StatusERR, ata.ErrorIDNF | ata.ErrorABRT},
		{"READ VERIFY crossing end", ata.Command{Op: ata.CmdReadVerifySectors, Addressing: ata.AddrLBA28, LBA: 4090, Count: 7}, ata.StatusDRDY | ata.StatusERR, ata.ErrorIDNF | ata.ErrorABRT},
		{"READ VERIFY to the end", ata.Command{Op: ata.CmdReadVerifySectors, Addressing: ata.AddrLBA28, LBA: 4090, Count: 6}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"SET FEATURES write cache off", ata.Command{Op: ata.CmdSetFeatures, Features: 0x82}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"SET FEATURES MWDMA1", ata.Command{Op: ata.CmdSetFeatures, Features: 3, Count: 0x21}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"FLUSH CACHE", ata.Command{Op: ata.CmdFlushCache}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"SEEK", ata.Command{Op: ata.CmdSeek, Addressing: ata.AddrLBA28, LBA: 4095}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"SEEK past end", ata.Command{Op: ata.CmdSeek, Addressing: ata.AddrLBA28, LBA: 4096}, ata.StatusDRDY | ata.StatusERR, ata.ErrorIDNF | ata.ErrorABRT},
		{"RECALIBRATE", ata.Command{Op: ata.CmdRecalibrate}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"IDLE IMMEDIATE", ata.Command{Op: ata.CmdIdleImmediate}, ata.StatusDRDY | ata.StatusDSC, 0},
		{"EXECUTE DEVICE DIAGNOSTIC", ata.Command{Op: ata.CmdExecuteDeviceDiagnostic}, ata.StatusDRDY | ata.StatusDSC, ata.DiagPassed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, testInfo(4096))
			issue(r.dev, tt.cmd)
			if got := ata.Status(r.dev.ReadReg(ata.RegAltStatus)); got != tt.status {
				t.Errorf("status %v, want %v", got, tt.status)
			}
			if got := ata.ErrorBits(r.dev.ReadReg(ata.RegError)); got != tt.err {
				t.Errorf("error %v, want %v", got, tt.err)
			}
			if !r.dev.INTRQ() || r.irqs != 1 {
				t.Errorf("INTRQ %v after %d interrupts, want one", r.dev.INTRQ(), r.irqs)
			}
			r.dev.ReadReg(ata.RegStatus)
			if r.dev.INTRQ() {
				t.Error("reading status did not clear INTRQ")
			}
			if ata.Status(r.dev.ReadReg(ata.RegStatus)).OK() != (tt.status&ata.StatusERR == 0) {
				t.Error("Status.OK disagrees")
			}
		})
	}
}

func TestFailingLBAInRegisters(t *testing.T) {
	r := newRig(t, testInfo(4096))
	issue(r.dev, ata.Command{Op: ata.CmdWriteDMAExt, Addressing: ata.AddrLBA48, LBA: 4000, Count: 200})
	tf := r.dev.TaskFile()
	lba := uint64(tf.LBALow) | uint64(tf.LBAMid)<<8 | uint64(tf.LBAHigh)<<16 | uint64(tf.HOBLBALow)<<24
	if lba != 4096 || r.dev.Error() != ata.ErrorIDNF|ata.ErrorABRT {
		t.Errorf("failing LBA %d error %v, want 4096 IDNF|ABRT", lba, r.dev.Error())
	}
	if len(r.disk.writes) != 0 {
		t.Errorf("backend saw writes %v", r.disk.writes)
	}
}

// chunkDMA moves data in 512-byte calls, as a scatter-gather engine might.
type chunkDMA struct{ buf []byte }

func (c *chunkDMA) DeviceToHost(src io.ReaderAt, off, n int64) error {
	for i := int64(0); i < n; i += 512 {
		if _, err := src.ReadAt(c.buf[i:i+512], off+i); err != nil {
			return err
		}
	}
	return nil
}

func (c *chunkDMA) HostToDevice(dst io.WriterAt, off, n int64) error {
	for i := int64(0); i < n; i += 512 {
		if _, err := dst.WriteAt(c.buf[i:i+512], off+i); err != nil {
			return err
		}
	}
	return nil
}

func TestDMAErrors(t *testing.T) {
	disk := newMemDisk(1024, 512)
	disk.badRead[37] = true
	disk.badWrite[40] = true
	eng := &chunkDMA{buf: make([]byte, 64*512)}
	d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: disk, DMA: eng})
	if err != nil {
		t.Fatal(err)
	}
	h := attach(t, d, ata.BusMasterFunc(func(b []byte) error { eng.buf = b; return nil }))
	read := ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, LBA: 30, Count: 16}
	err = h.Exec(&read, make([]byte, 16*512))
	want := &ata.Error{Op: ata.CmdReadDMA, Status: ata.StatusDRDY | ata.StatusERR, Err: ata.ErrorUNC, LBA: 37}
	if diff := cmp.Diff(want, ataErr(t, err)); diff != "" {
		t.Errorf("read error (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ata.ErrUncorrectable) || !errors.Is(d.BackendErr(), errInjected) {
		t.Errorf("errors.Is: %v / backend %v", err, d.BackendErr())
	}
	write := ata.Command{Op: ata.CmdWriteDMAExt, Addressing: ata.AddrLBA48, LBA: 32, Count: 16}
	err = h.Exec(&write, bytes.Repeat([]byte{0xAB}, 16*512))
	want = &ata.Error{Op: ata.CmdWriteDMAExt, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT, LBA: 40}
	if diff := cmp.Diff(want, ataErr(t, err)); diff != "" {
		t.Errorf("write error (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ata.ErrDeviceFault) {
		t.Errorf("errors.Is(ErrDeviceFault) false for %v", err)
	}
	// The engine failing on its own (buffer too short) is ABRT, not UNC.
	be := &ata.BufferDMA{}
	d2, _ := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: newMemDisk(1024, 512), DMA: be})
	issue(d2, ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, LBA: 0, Count: 2})
	if d2.Status() != ata.StatusDRDY|ata.StatusERR || d2.Error() != ata.ErrorABRT || !errors.Is(d2.BackendErr(), ata.ErrDMABuffer) {
		t.Errorf("engine error: status %v error %v backend %v", d2.Status(), d2.Error(), d2.BackendErr())
	}
}

func TestNIEN(t *testing.T) {
	r := newRig(t, testInfo(64))
	r.dev.WriteReg(ata.RegDeviceControl, uint8(ata.ControlNIEN))
	issue(r.dev, ata.Command{Op: ata.CmdFlushCache})
	if r.dev.INTRQ() || r.irqs != 0 {
		t.Fatalf("INTRQ asserted with nIEN set (%d callbacks)", r.irqs)
	}
	r.dev.WriteReg(ata.RegDeviceControl, 0)
	if !r.dev.INTRQ() || r.irqs != 1 {
		t.Fatalf("pending interrupt not asserted when nIEN cleared (INTRQ %v, %d callbacks)", r.dev.INTRQ(), r.irqs)
	}
	r.dev.ReadReg(ata.RegAltStatus)
	if !r.dev.INTRQ() {
		t.Fatal("alternate status cleared INTRQ")
	}
}

func TestDevice1Absent(t *testing.T) {
	r := newRig(t, testInfo(64))
	r.dev.WriteReg(ata.RegDevice, uint8(ata.DeviceDEV))
	if st := r.dev.ReadReg(ata.RegStatus); st != 0 {
		t.Errorf("status of absent device 1 = %02x", st)
	}
	r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdIdentifyDevice))
	if r.dev.State() != ata.StateIdle || r.irqs != 0 {
		t.Errorf("command to device 1 was run: state %v", r.dev.State())
	}
	r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdExecuteDeviceDiagnostic))
	r.dev.WriteReg(ata.RegDevice, 0)
	if r.irqs != 1 || r.dev.ReadReg(ata.RegError) != ata.DiagPassed || r.dev.ReadReg(ata.RegStatus) != uint8(ata.StatusDRDY|ata.StatusDSC) {
		t.Errorf("diagnostic for both devices: irqs %d error %02x", r.irqs, r.dev.ReadReg(ata.RegError))
	}
}

// READ MULTIPLE moves DRQ blocks of the multiple count, the last one short;
// each block is announced by DRQ and an interrupt.
func TestPIOBlocks(t *testing.T) {
	r := newRig(t, testInfo(64))
	for i := range r.disk.data {
		r.disk.data[i] = byte(i / 512)
	}
	issue(r.dev, ata.Command{Op: ata.CmdSetMultipleMode, Count: 4})
	r.dev.ReadReg(ata.RegStatus)
	issue(r.dev, ata.Command{Op: ata.CmdReadMultiple, Addressing: ata.AddrLBA28, LBA: 3, Count: 10})
	var blocks []int
	for r.dev.INTRQ() {
		st := ata.Status(r.dev.ReadReg(ata.RegStatus))
		if st != ata.StatusDRDY|ata.StatusDSC|ata.StatusDRQ {
			t.Fatalf("status %v at a block", st)
		}
		n := 0
		for r.dev.State() == ata.StatePIOIn && !r.dev.INTRQ() {
			v := r.dev.ReadData32()
			if want := uint32(3+(sum(blocks)*512+n)/512) * 0x01010101; v != want {
				t.Fatalf("word %d of block %d = %08x, want %08x", n/4, len(blocks), v, want)
			}
			n += 4
		}
		blocks = append(blocks, n/512)
	}
	if diff := cmp.Diff([]int{4, 4, 2}, blocks); diff != "" {
		t.Errorf("DRQ blocks (-want +got):\n%s", diff)
	}
	if st := r.dev.Status(); st != ata.StatusDRDY|ata.StatusDSC || r.dev.State() != ata.StateIdle {
		t.Errorf("after the last block: %v %v", st, r.dev.State())
	}
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

func TestWritesIgnoredWhileBusy(t *testing.T) {
	r := newRig(t, testInfo(64))
	issue(r.dev, ata.Command{Op: ata.CmdWriteSectors, Addressing: ata.AddrLBA28, LBA: 2, Count: 1})
	if r.dev.State() != ata.StatePIOOut || r.dev.Status() != ata.StatusDRDY|ata.StatusDSC|ata.StatusDRQ {
		t.Fatalf("state %v status %v", r.dev.State(), r.dev.Status())
	}
	r.dev.WriteReg(ata.RegLBALow, 9)
	r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdReadSectors))
	for i := range 256 {
		r.dev.WriteData16(uint16(i))
	}
	if r.dev.Status() != ata.StatusDRDY|ata.StatusDSC || len(r.disk.writes) != 1 || r.disk.writes[0] != [2]int64{1024, 512} {
		t.Fatalf("status %v writes %v", r.dev.Status(), r.disk.writes)
	}
	if r.dev.ReadReg(ata.RegLBALow) != 2 {
		t.Error("LBA low written during DRQ")
	}
}

func TestSoftReset(t *testing.T) {
	r := newRig(t, testInfo(64))
	issue(r.dev, ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 2, Count: 4})
	r.dev.ReadData16()
	r.dev.WriteReg(ata.RegDeviceControl, uint8(ata.ControlSRST))
	if r.dev.State() != ata.StateReset || r.dev.Status() != ata.StatusBSY {
		t.Fatalf("SRST set: %v %v", r.dev.State(), r.dev.Status())
	}
	r.dev.WriteReg(ata.RegCommand, uint8(ata.CmdIdentifyDevice))
	r.dev.WriteReg(ata.RegDeviceControl, 0)
	tf := r.dev.TaskFile()
	got := [6]uint8{tf.Count, tf.LBALow, tf.LBAMid, tf.LBAHigh, uint8(r.dev.Error()), uint8(r.dev.Status())}
	if got != [6]uint8{1, 1, 0, 0, 1, 0x50} || r.dev.State() != ata.StateIdle || r.dev.INTRQ() {
		t.Errorf("after SRST: % x state %v INTRQ %v", got, r.dev.State(), r.dev.INTRQ())
	}
}

func TestTrimRanges(t *testing.T) {
	r := newRig(t, testInfo(4096))
	for i := range r.disk.data {
		r.disk.data[i] = 0xFF
	}
	buf := make([]byte, 512)
	ata.PutRange(buf[0:], 100, 8)
	ata.PutRange(buf[8:], 108, 8) // adjacent: merged
	ata.PutRange(buf[16:], 0, 0)  // unused entry
	ata.PutRange(buf[24:], 4000, 96)
	c := ata.Command{Op: ata.CmdDataSetManagement, Features: ata.DSMTrim, Count: 1, Device: ata.DeviceLBA}
	if err := r.host.Exec(&c, buf); err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{100 * 512, 16 * 512}, {4000 * 512, 96 * 512}}
	if diff := cmp.Diff(want, r.disk.trims); diff != "" {
		t.Errorf("trims (-want +got):\n%s", diff)
	}
	// Without TRIM in IDENTIFY the command aborts.
	info := testInfo(64)
	info.TRIM = false
	d, _ := ata.NewDevice(ata.Config{Info: info, Backend: nullDisk{}, DMA: &ata.BufferDMA{}})
	issue(d, c)
	if d.Error() != ata.ErrorABRT {
		t.Errorf("DSM without TRIM: error %v", d.Error())
	}
}

func TestNoDMAEngine(t *testing.T) {
	d, err := ata.NewDevice(ata.Config{Info: plainInfo(64), Backend: newMemDisk(64, 512)})
	if err != nil {
		t.Fatal(err)
	}
	id := d.Identify()
	if id[49]&0x100 != 0 || id[63] != 0 || id[88] != 0 {
		t.Errorf("IDENTIFY advertises DMA without an engine: %04x %04x %04x", id[49], id[63], id[88])
	}
	issue(d, ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, Count: 1})
	if d.Error() != ata.ErrorABRT {
		t.Errorf("READ DMA without engine: %v", d.Error())
	}
}

func TestNewDeviceErrors(t *testing.T) {
	if _, err := ata.NewDevice(ata.Config{Info: testInfo(64)}); !errors.Is(err, ata.ErrNoBackend) {
		t.Errorf("no backend: %v", err)
	}
	if _, err := ata.NewDevice(ata.Config{Info: plainInfo(65), Backend: newMemDisk(64, 512)}); !errors.Is(err, ata.ErrInfo) {
		t.Errorf("backend too small: %v", err)
	}
	bad := testInfo(64)
	bad.Serial = "\x00"
	if _, err := ata.NewDevice(ata.Config{Info: bad, Backend: newMemDisk(64, 512), DMA: &ata.BufferDMA{}}); !errors.Is(err, ata.ErrInfo) {
		t.Errorf("bad serial: %v", err)
	}
}

// TRIM is refused where DATA SET MANAGEMENT could only abort: over a
// backend without Trim, or without a DMA engine.
func TestNewDeviceTRIM(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend ata.Backend
		dma     ata.DMA
		want    error
	}{
		{"Trim and DMA", newMemDisk(64, 512), &ata.BufferDMA{}, nil},
		{"no Trim", onlyReadWrite{newMemDisk(64, 512)}, &ata.BufferDMA{}, ata.ErrNoTrim},
		{"no DMA", newMemDisk(64, 512), nil, ata.ErrNoTrim},
	} {
		d, err := ata.NewDevice(ata.Config{Info: testInfo(64), Backend: tc.backend, DMA: tc.dma})
		if !errors.Is(err, tc.want) || (err == nil) != (d != nil) {
			t.Errorf("%s: NewDevice = %v, %v; want %v", tc.name, d, err, tc.want)
		}
		if _, err := ata.NewDevice(ata.Config{Info: plainInfo(64), Backend: tc.backend, DMA: tc.dma}); err != nil {
			t.Errorf("%s without TRIM: %v", tc.name, err)
		}
	}
}

// onlyReadWrite hides every optional method of its backend.
type onlyReadWrite struct{ b ata.Backend }

func (o onlyReadWrite) ReadAt(p []byte, off int64) (int, error)  { return o.b.ReadAt(p, off) }
func (o onlyReadWrite) WriteAt(p []byte, off int64) (int, error) { return o.b.WriteAt(p, off) }

// A backend shorter than Sectors is refused where it can tell its size (a
// Sizer, a regular file), the error naming both sizes; a backend that
// cannot tell is taken at its word.
func TestNewDeviceBackendSize(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(100 * 512); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		backend ata.Backend
		sectors uint64
		msg     string // "" for success
	}{
		{"file exact", f, 100, ""},
		{"file short", f, 101, "Sectors 101 of 512 bytes need 51712 bytes; the backend holds 51200"},
		{"Sizer exact", newMemDisk(100, 512), 100, ""},
		{"Sizer short", newMemDisk(100, 512), 128, "Sectors 128 of 512 bytes need 65536 bytes; the backend holds 51200"},
		{"no size", onlyReadWrite{newMemDisk(100, 512)}, 1 << 20, ""},
	} {
		_, err := ata.NewDevice(ata.Config{Info: plainInfo(tc.sectors), Backend: tc.backend})
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.msg != "" && (!errors.Is(err, ata.ErrInfo) || !strings.Contains(fmt.Sprint(err), tc.msg)):
			t.Errorf("%s: NewDevice = %v, want ErrInfo naming %q", tc.name, err, tc.msg)
		}
	}
	// 4 KiB logical sectors count in their own size.
	info := plainInfo(13)
	info.LogicalSectorSize = 4096
	if _, err := ata.NewDevice(ata.Config{Info: info, Backend: f}); !errors.Is(err, ata.ErrInfo) {
		t.Errorf("13 4K sectors over 50 KiB: %v", err)
	}
}

// 4096-byte logical sectors: each PIO block is one 4 KiB sector.
func TestLogicalSector4K(t *testing.T) {
	info := testInfo(16)
	info.LogicalSectorSize = 4096
	r := newRig(t, info)
	id, err := r.host.Identify()
	if err != nil || r.host.SectorSize != 4096 || id.Sectors() != 16 {
		t.Fatalf("identify: %v sector size %d", err, r.host.SectorSize)
	}
	data := make([]byte, 3*4096)
	for i := range data {
		data[i] = byte(i * 13)
	}
	for _, op := range []ata.Opcode{ata.CmdWriteSectors, ata.CmdWriteDMA} {
		c := ata.Command{Op: op, Addressing: ata.AddrLBA28, LBA: 5, Count: 3}
		if err := r.host.Exec(&c, data); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.disk.data[5*4096:8*4096], data) {
			t.Fatalf("%v: backend bytes differ", op)
		}
		got := make([]byte, len(data))
		c = ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 5, Count: 3}
		if err := r.host.Exec(&c, got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back: %v", err)
		}
	}
}

// An *os.File is a backend as it is; FUA writes reach it through Sync.
func TestOSFileBackend(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(128 * 512); err != nil {
		t.Fatal(err)
	}
	eng := &ata.BufferDMA{}
	d, err := ata.NewDevice(ata.Config{Info: plainInfo(128), Backend: f, DMA: eng})
	if err != nil {
		t.Fatal(err)
	}
	h := attach(t, d, eng)
	data := bytes.Repeat([]byte("nhd!"), 2*128)
	c, _ := ata.ReadWrite(true, 7, 2, ata.RWDMA, true)
	if err := h.Exec(&c, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 7*512); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file contents: %v", err)
	}
}

func TestHardReset(t *testing.T) {
	r := newRig(t, testInfo(64))
	for _, c := range []ata.Command{
		{Op: ata.CmdSetFeatures, Features: ata.FeatureDisableWriteCache},
		{Op: ata.CmdSetMultipleMode, Count: 2},
		{Op: ata.CmdSetFeatures, Features: ata.FeatureSetTransferMode, Count: ata.XferMWDMA0 + 1},
	} {
		if err := r.host.Exec(&c, nil); err != nil {
			t.Fatal(err)
		}
	}
	issue(r.dev, ata.Command{Op: ata.CmdWriteSectors, Addressing: ata.AddrLBA28, LBA: 1, Count: 1})
	r.dev.WriteReg(ata.RegDeviceControl, uint8(ata.ControlNIEN))
	r.dev.HardReset()
	id := r.dev.Identify()
	if id.WriteCacheEnabled() != true || id.Multiple() != 16 || id.DMAMode() != ata.XferUDMA0+6 {
		t.Errorf("settings after hard reset: wc %v multiple %d mode %02x", id.WriteCacheEnabled(), id.Multiple(), id.DMAMode())
	}
	if r.dev.State() != ata.StateIdle || r.dev.Status() != ata.StatusDRDY|ata.StatusDSC || r.dev.Error() != ata.DiagPassed || r.dev.Fault() != nil {
		t.Errorf("after hard reset: %v %v %v %v", r.dev.State(), r.dev.Status(), r.dev.Error(), r.dev.Fault())
	}
	if len(r.disk.writes) != 0 {
		t.Errorf("dropped write reached the backend: %v", r.disk.writes)
	}
}

// rogueDMA writes one sector past the transfer it was given.
type rogueDMA struct{}

func (rogueDMA) DeviceToHost(src io.ReaderAt, off, n int64) error {
	_, err := src.ReadAt(make([]byte, 512), off+n)
	return err
}

func (rogueDMA) HostToDevice(dst io.WriterAt, off, n int64) error {
	_, err := dst.WriteAt(make([]byte, 512), off+n)
	return err
}

func TestDMAOutsideTransfer(t *testing.T) {
	disk := newMemDisk(64, 512)
	d, err := ata.NewDevice(ata.Config{Info: testInfo(64), Backend: disk, DMA: rogueDMA{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []ata.Opcode{ata.CmdWriteDMA, ata.CmdReadDMA} {
		issue(d, ata.Command{Op: op, Addressing: ata.AddrLBA28, LBA: 4, Count: 2})
		if d.Status() != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorABRT || !errors.Is(d.BackendErr(), ata.ErrOutsideTransfer) {
			t.Errorf("%v: status %v error %v backend %v", op, d.Status(), d.Error(), d.BackendErr())
		}
	}
	if len(disk.writes) != 0 {
		t.Errorf("rogue engine reached the backend: %v", disk.writes)
	}
}

// spyDisk checks, from inside each backend call, what the host would see
// in the status register at that moment.
type spyDisk struct {
	*memDisk
	dev    *ata.Device
	t      *testing.T
	states []ata.State
}

func (s *spyDisk) look() {
	st := ata.Status(s.dev.ReadReg(ata.RegAltStatus))
	if s.dev.State() == ata.StateBusy && st&ata.StatusBSY == 0 || s.dev.State() == ata.StateDMA && st&(ata.StatusDRQ|ata.StatusBSY) != ata.StatusDRQ {
		s.t.Errorf("state %v with status %v during a backend call", s.dev.State(), st)
	}
	s.states = append(s.states, s.dev.State())
}

func (s *spyDisk) ReadAt(p []byte, off int64) (int, error) { s.look(); return s.memDisk.ReadAt(p, off) }
func (s *spyDisk) WriteAt(p []byte, off int64) (int, error) {
	s.look()
	return s.memDisk.WriteAt(p, off)
}

// BSY while the device works on the backend, DRQ while the DMA engine
// moves data.
func TestBusyDuringBackendCalls(t *testing.T) {
	spy := &spyDisk{memDisk: newMemDisk(64, 512), t: t}
	eng := &ata.BufferDMA{}
	d, err := ata.NewDevice(ata.Config{Info: testInfo(64), Backend: spy, DMA: eng})
	if err != nil {
		t.Fatal(err)
	}
	spy.dev = d
	h := attach(t, d, eng)
	buf := make([]byte, 2*512)
	for _, op := range []ata.Opcode{ata.CmdReadSectors, ata.CmdWriteSectors, ata.CmdReadDMA, ata.CmdWriteDMA} {
		c := ata.Command{Op: op, Addressing: ata.AddrLBA28, LBA: 1, Count: 2}
		if err := h.Exec(&c, buf); err != nil {
			t.Fatal(err)
		}
	}
	want := []ata.State{ata.StateBusy, ata.StateBusy, ata.StateBusy, ata.StateBusy, ata.StateDMA, ata.StateDMA}
	if diff := cmp.Diff(want, spy.states); diff != "" {
		t.Errorf("states seen by the backend (-want +got):\n%s", diff)
	}
}

// The bridge's pattern: several Devices on one backend, each driven by
// its own goroutine, run commands in parallel (run with -race).
func TestParallelDevices(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "shared.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const per = 64
	const n = 4
	if err := f.Truncate(n * per * 512); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, n)
	for g := range n {
		go func() {
			eng := &ata.BufferDMA{}
			d, err := ata.NewDevice(ata.Config{Info: plainInfo(n * per), Backend: f, DMA: eng})
			if err != nil {
				errs <- err
				return
			}
			h, _, err := ata.Attach(d, eng) // learns the multiple count, as libata does
			if err != nil {
				errs <- err
				return
			}
			data := bytes.Repeat([]byte{byte(g + 1)}, 8*512)
			back := make([]byte, len(data))
			for i := 0; i < per; i += 8 {
				lba := uint64(g*per + i)
				w, _ := ata.ReadWrite(true, lba, 8, ata.RWDMA, false)
				r, _ := ata.ReadWrite(false, lba, 8, ata.RWPIOMultiple, false)
				if err := h.Exec(&w, data); err != nil {
					errs <- err
					return
				}
				if err := h.Exec(&r, back); err != nil || !bytes.Equal(back, data) {
					errs <- errors.Join(err, errors.New("read back differs"))
					return
				}
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// The host driver as an io.ReaderAt/io.WriterAt, in every mode, with a
// transfer long enough (300 sectors) to need the 48-bit opcodes.
func TestHostReaderWriterAt(t *testing.T) {
	for _, mode := range []ata.RWMode{ata.RWPIO, ata.RWPIOMultiple, ata.RWDMA} {
		r := newRig(t, testInfo(1024))
		if _, err := r.host.Identify(); err != nil {
			t.Fatal(err)
		}
		r.host.Mode = mode
		r.host.FUA = mode != ata.RWPIO
		var _ io.ReaderAt = r.host
		var _ io.WriterAt = r.host
		data := make([]byte, 300*512)
		for i := range data {
			data[i] = byte(i*7 + int(mode))
		}
		if n, err := r.host.WriteAt(data, 700*512); err != nil || n != len(data) {
			t.Fatalf("mode %d WriteAt: %d, %v", mode, n, err)
		}
		if !bytes.Equal(r.disk.data[700*512:1000*512], data) {
			t.Fatalf("mode %d: backend differs", mode)
		}
		back := make([]byte, len(data))
		if n, err := r.host.ReadAt(back, 700*512); err != nil || n != len(back) || !bytes.Equal(back, data) {
			t.Fatalf("mode %d ReadAt: %d, %v", mode, n, err)
		}
		if _, err := r.host.ReadAt(back[:512], 1024*512); !errors.Is(err, ata.ErrIDNotFound) {
			t.Errorf("read past the end: %v", err)
		}
		if _, err := r.host.ReadAt(back[:100], 0); !errors.Is(err, ata.ErrUnaligned) {
			t.Errorf("unaligned read: %v", err)
		}
		if err := r.host.Flush(); err != nil {
			t.Error(err)
		}
	}
}

// Attach learns the device from IDENTIFY DEVICE: capacity, sector size,
// multiple count and the CHS translation in use.
func TestAttachLearnsDevice(t *testing.T) {
	info := plainInfo(5000)
	info.LogicalSectorSize = 4096
	info.MaxMultiple = 8
	d, err := ata.NewDevice(ata.Config{Info: info, Backend: newMemDisk(5000, 4096)})
	if err != nil {
		t.Fatal(err)
	}
	h, id, err := ata.Attach(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := [4]uint64{h.Sectors, uint64(h.SectorSize), uint64(h.Multiple), h.Geometry.Sectors()}
	if want := [4]uint64{5000, 4096, 8, ata.DefaultGeometry(5000).Sectors()}; got != want || id.Model() != info.Model {
		t.Errorf("Attach: sectors, sector size, multiple, CHS sectors %v, want %v (model %q)", got, want, id.Model())
	}
	// A translation set by INITIALIZE DEVICE PARAMETERS is what the next
	// host learns.
	init := ata.Command{Op: ata.CmdInitializeDeviceParams, Count: 32, Device: 7}
	if err := h.Exec(&init, nil); err != nil {
		t.Fatal(err)
	}
	h2, _, err := ata.Attach(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Geometry != h.Geometry || h2.Geometry.Heads != 8 || h2.Geometry.SectorsPerTrack != 32 {
		t.Errorf("geometry after INITIALIZE DEVICE PARAMETERS: %+v, first host %+v", h2.Geometry, h.Geometry)
	}
	// NewHost, told the capacity, still drives the device.
	old := ata.NewHost(d, 5000, nil)
	old.SectorSize = 4096
	r, _ := ata.ReadWrite(false, 4999, 1, ata.RWPIO, false)
	if err := old.Exec(&r, make([]byte, 4096)); err != nil {
		t.Errorf("NewHost: %v", err)
	}
}

// A device that never answers IDENTIFY fails Attach.
func TestAttachTimeout(t *testing.T) {
	if h, _, err := ata.Attach(deadPort{}, nil); !errors.Is(err, ata.ErrTimeout) || h != nil {
		t.Errorf("Attach to a busy port = %v, %v; want ErrTimeout", h, err)
	}
}

// deadPort is a device stuck in BSY.
type deadPort struct{}

func (deadPort) ReadReg(ata.Reg) uint8   { return uint8(ata.StatusBSY) }
func (deadPort) WriteReg(ata.Reg, uint8) {}
func (deadPort) ReadData16() uint16      { return 0 }
func (deadPort) WriteData16(uint16)      {}
func (deadPort) ReadData32() uint32      { return 0 }
func (deadPort) WriteData32(uint32)      {}
func (deadPort) INTRQ() bool             { return false }
