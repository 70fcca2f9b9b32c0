package ata_test

import (
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/allocs"
)

const benchSectors = 1 << 14 // 8 MiB

func benchDevice(tb testing.TB) (*ata.Device, *ata.BufferDMA) {
	eng := &ata.BufferDMA{Buf: make([]byte, 128*512)}
	d, err := ata.NewDevice(ata.Config{Info: testInfo(benchSectors), Backend: newMemDisk(benchSectors, 512), DMA: eng})
	if err != nil {
		tb.Fatal(err)
	}
	return d, eng
}

// readDMAExt64K is a READ DMA EXT of 128 sectors (64 KiB, the paper's
// block) at LBA 1000, as a FIS would carry it.
var readDMAExt64K = ata.TaskFile{Command: ata.CmdReadDMAExt, Count: 128, LBALow: 0xE8, LBAMid: 0x03, Device: ata.DeviceLBA}

// The bridge's requirement: decode + dispatch + DMA of READ DMA EXT
// allocates nothing. allocs.PerRun counts, it does not time.
func TestReadDMAExtAllocs(t *testing.T) {
	d, _ := benchDevice(t)
	tf := readDMAExt64K
	nallocs := allocs.PerRun(1000, func() {
		d.Issue(&tf)
		d.ReadReg(ata.RegStatus)
	})
	if nallocs > allocs.Slack {
		t.Errorf("READ DMA EXT: %v allocations per command, want 0", nallocs)
	}
	if !d.Status().OK() {
		t.Errorf("status %v", d.Status())
	}
	var c ata.Command
	g := ata.DefaultGeometry(benchSectors)
	nallocs = allocs.PerRun(1000, func() {
		if err := ata.Decode(&tf, g, &c); err != nil {
			t.Fatal(err)
		}
		var out ata.TaskFile
		if err := c.Encode(g, &out); err != nil {
			t.Fatal(err)
		}
	})
	if nallocs > allocs.Slack {
		t.Errorf("Decode+Encode: %v allocations, want 0", nallocs)
	}
}

// BenchmarkReadDMAExt: decode + dispatch + DMA (a copy of 64 KiB from the
// memory backend into the host buffer) + status read.
func BenchmarkReadDMAExt(b *testing.B) {
	d, _ := benchDevice(b)
	tf := readDMAExt64K
	b.ReportAllocs()
	b.SetBytes(128 * 512)
	for b.Loop() {
		d.Issue(&tf)
		if !ata.Status(d.ReadReg(ata.RegStatus)).OK() {
			b.Fatal(d.Status())
		}
	}
}

// BenchmarkReadDMAExtDispatch: the same command with a 1-sector transfer,
// so the figure is the per-command cost rather than the copy.
func BenchmarkReadDMAExtDispatch(b *testing.B) {
	d, _ := benchDevice(b)
	tf := readDMAExt64K
	tf.Count = 1
	b.ReportAllocs()
	for b.Loop() {
		d.Issue(&tf)
		d.ReadReg(ata.RegStatus)
	}
}

// BenchmarkReadDMAExtRegisters: the host-side view, every register
// written one by one (HOB bytes first) before the command.
func BenchmarkReadDMAExtRegisters(b *testing.B) {
	d, _ := benchDevice(b)
	b.ReportAllocs()
	b.SetBytes(128 * 512)
	for b.Loop() {
		d.WriteReg(ata.RegFeatures, 0)
		d.WriteReg(ata.RegCount, 0)
		d.WriteReg(ata.RegLBALow, 0)
		d.WriteReg(ata.RegLBAMid, 0)
		d.WriteReg(ata.RegLBAHigh, 0)
		d.WriteReg(ata.RegFeatures, 0)
		d.WriteReg(ata.RegCount, 128)
		d.WriteReg(ata.RegLBALow, 0xE8)
		d.WriteReg(ata.RegLBAMid, 0x03)
		d.WriteReg(ata.RegLBAHigh, 0)
		d.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA))
		d.WriteReg(ata.RegCommand, uint8(ata.CmdReadDMAExt))
		d.ReadReg(ata.RegStatus)
	}
}

func BenchmarkDecode(b *testing.B) {
	tf := readDMAExt64K
	g := ata.DefaultGeometry(benchSectors)
	var c ata.Command
	b.ReportAllocs()
	for b.Loop() {
		if err := ata.Decode(&tf, g, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPIORead compares moving 64 KiB of READ MULTIPLE EXT through the
// data register 16 and 32 bits at a time with the bulk ReadData path.
func BenchmarkPIORead(b *testing.B) {
	tf := ata.TaskFile{Command: ata.CmdReadMultipleExt, Count: 128, LBALow: 8, Device: ata.DeviceLBA}
	for _, mode := range []string{"data16", "data32", "bulk"} {
		b.Run(mode, func(b *testing.B) {
			d, _ := benchDevice(b)
			buf := make([]byte, 16*512)
			b.ReportAllocs()
			b.SetBytes(128 * 512)
			for b.Loop() {
				d.Issue(&tf)
				for d.State() == ata.StatePIOIn {
					d.ReadReg(ata.RegStatus)
					switch mode {
					case "data16":
						for range 16 * 256 {
							d.ReadData16()
						}
					case "data32":
						for range 16 * 128 {
							d.ReadData32()
						}
					default:
						d.ReadData(buf)
					}
				}
				if !d.Status().OK() {
					b.Fatal(d.Status())
				}
			}
		})
	}
}

func BenchmarkIdentify(b *testing.B) {
	info := testInfo(1 << 30)
	b.ReportAllocs()
	for b.Loop() {
		id := info.Identify()
		if !id.ChecksumOK() {
			b.Fatal("checksum")
		}
	}
}

// BenchmarkAnchorCopy64K is the anchor for BenchmarkReadDMAExt: the bare
// 64 KiB memory copy the DMA command performs. The difference is the cost
// of decode, dispatch, the backend wrapper and the status handling.
func BenchmarkAnchorCopy64K(b *testing.B) {
	src := make([]byte, 128*512)
	dst := make([]byte, 128*512)
	b.ReportAllocs()
	b.SetBytes(128 * 512)
	for b.Loop() {
		copy(dst, src)
	}
}
