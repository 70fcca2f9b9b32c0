package ata_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden Register Host-to-Device FIS vectors, laid out by hand from the
// SATA 3.x §10.5.5 byte map:
//
//	27 C|pm cmd feat | lba0 lba1 lba2 dev | lba3 lba4 lba5 feat_hi | cnt0 cnt1 icc ctl | aux
var goldenFIS = []struct {
	name string
	cmd  ata.Command
	geom ata.Geometry
	fis  string
}{
	{"READ DMA EXT LBA48 count 256", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 0x123456789ABC, Count: 256},
		ata.Geometry{}, "27 80 25 00 BC 9A 78 40 56 34 12 00 00 01 00 00 00 00 00 00"},
	{"WRITE DMA FUA EXT count 65536", ata.Command{Op: ata.CmdWriteDMAFUAExt, Addressing: ata.AddrLBA48, LBA: 0x1000, Count: 65536},
		ata.Geometry{}, "27 80 3D 00 00 10 00 40 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"READ MULTIPLE EXT", ata.Command{Op: ata.CmdReadMultipleExt, Addressing: ata.AddrLBA48, LBA: 0xFFFFFFFF, Count: 0x1234},
		ata.Geometry{}, "27 80 29 00 FF FF FF 40 FF 00 00 00 34 12 00 00 00 00 00 00"},
	{"READ VERIFY SECTORS EXT", ata.Command{Op: ata.CmdReadVerifySectorsExt, Addressing: ata.AddrLBA48, LBA: 5, Count: 2},
		ata.Geometry{}, "27 80 42 00 05 00 00 40 00 00 00 00 02 00 00 00 00 00 00 00"},
	{"WRITE MULTIPLE FUA EXT", ata.Command{Op: ata.CmdWriteMultipleFUAExt, Addressing: ata.AddrLBA48, LBA: 7, Count: 16},
		ata.Geometry{}, "27 80 CE 00 07 00 00 40 00 00 00 00 10 00 00 00 00 00 00 00"},
	{"READ SECTORS LBA28 count 256", ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 0x0ABCDEF1, Count: 256},
		ata.Geometry{}, "27 80 20 00 F1 DE BC 4A 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"READ DMA LBA28 device 1", ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, LBA: 0x0123456, Count: 8, Device: ata.DeviceDEV},
		ata.Geometry{}, "27 80 C8 00 56 34 12 50 00 00 00 00 08 00 00 00 00 00 00 00"},
	{"WRITE SECTORS CHS 2/3/4", ata.Command{Op: ata.CmdWriteSectors, Addressing: ata.AddrCHS, LBA: 2208, Count: 1, Device: ata.DeviceObsolete},
		ata.DefaultGeometry(16514064), "27 80 30 00 04 02 00 A3 00 00 00 00 01 00 00 00 00 00 00 00"},
	{"READ MULTIPLE CHS last sector", ata.Command{Op: ata.CmdReadMultiple, Addressing: ata.AddrCHS, LBA: 16514063, Count: 1},
		ata.DefaultGeometry(16514064), "27 80 C4 00 3F FE 3F 0F 00 00 00 00 01 00 00 00 00 00 00 00"},
	{"SEEK LBA28", ata.Command{Op: ata.CmdSeek, Addressing: ata.AddrLBA28, LBA: 0x100},
		ata.Geometry{}, "27 80 70 00 00 01 00 40 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"SET FEATURES UDMA5", ata.Command{Op: ata.CmdSetFeatures, Features: ata.FeatureSetTransferMode, Count: ata.XferUDMA0 + 5},
		ata.Geometry{}, "27 80 EF 03 00 00 00 00 00 00 00 00 45 00 00 00 00 00 00 00"},
	{"DATA SET MANAGEMENT TRIM", ata.Command{Op: ata.CmdDataSetManagement, Features: ata.DSMTrim, Count: 1, Device: ata.DeviceLBA},
		ata.Geometry{}, "27 80 06 01 00 00 00 40 00 00 00 00 01 00 00 00 00 00 00 00"},
	{"IDENTIFY DEVICE", ata.Command{Op: ata.CmdIdentifyDevice, Device: ata.DeviceObsolete},
		ata.Geometry{}, "27 80 EC 00 00 00 00 A0 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"READ NATIVE MAX ADDRESS EXT", ata.Command{Op: ata.CmdReadNativeMaxAddressExt, Device: ata.DeviceLBA},
		ata.Geometry{}, "27 80 27 00 00 00 00 40 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"INITIALIZE DEVICE PARAMETERS 16/63", ata.Command{Op: ata.CmdInitializeDeviceParams, Count: 63, Device: ata.DeviceObsolete | 15},
		ata.Geometry{}, "27 80 91 00 00 00 00 AF 00 00 00 00 3F 00 00 00 00 00 00 00"},
	{"SET MULTIPLE MODE 16", ata.Command{Op: ata.CmdSetMultipleMode, Count: 16},
		ata.Geometry{}, "27 80 C6 00 00 00 00 00 00 00 00 00 10 00 00 00 00 00 00 00"},
	{"FLUSH CACHE EXT", ata.Command{Op: ata.CmdFlushCacheExt, Device: ata.DeviceLBA},
		ata.Geometry{}, "27 80 EA 00 00 00 00 40 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"CHECK POWER MODE", ata.Command{Op: ata.CmdCheckPowerMode},
		ata.Geometry{}, "27 80 E5 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"},
	{"SMART READ DATA", ata.Command{Op: ata.CmdSMART, Features: 0xD0, LBA: 0xC24F00},
		ata.Geometry{}, "27 80 B0 D0 00 4F C2 00 00 00 00 00 00 00 00 00 00 00 00 00"},
}

func TestGoldenFIS(t *testing.T) {
	for _, g := range goldenFIS {
		t.Run(g.name, func(t *testing.T) {
			want := unhex(t, g.fis)
			var tf ata.TaskFile
			if err := g.cmd.Encode(g.geom, &tf); err != nil {
				t.Fatalf("Encode: %v", err)
			}
			var got [ata.FISSize]byte
			tf.PutFIS(&got)
			if diff := cmp.Diff(want, got[:]); diff != "" {
				t.Errorf("encoded FIS (-want +got):\n%s", diff)
			}
			var back ata.TaskFile
			if err := back.ParseFIS(want); err != nil {
				t.Fatalf("ParseFIS: %v", err)
			}
			if diff := cmp.Diff(tf, back); diff != "" {
				t.Errorf("parsed task file (-encoded +parsed):\n%s", diff)
			}
			var dec ata.Command
			if err := ata.Decode(&back, g.geom, &dec); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(g.cmd, dec); diff != "" {
				t.Errorf("decoded command (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFISErrors(t *testing.T) {
	var tf ata.TaskFile
	if err := tf.ParseFIS(make([]byte, 19)); !errors.Is(err, errUnexpectedEOF) {
		t.Errorf("short FIS: %v", err)
	}
	b := make([]byte, 20)
	b[0] = 0x34 // D2H
	if err := tf.ParseFIS(b); !errors.Is(err, ata.ErrNotH2DFIS) {
		t.Errorf("D2H FIS: %v", err)
	}
}

// Decoding details the encoder never produces.
func TestDecodeSpecialCases(t *testing.T) {
	g := ata.DefaultGeometry(1 << 20)
	tests := []struct {
		name string
		tf   ata.TaskFile
		want ata.Command
		err  error
	}{
		{"28-bit count 0 is 256", ata.TaskFile{Command: ata.CmdWriteDMA, Device: 0xE0},
			ata.Command{Op: ata.CmdWriteDMA, Addressing: ata.AddrLBA28, Count: 256, Device: 0xA0}, nil},
		{"48-bit count 0 is 65536", ata.TaskFile{Command: ata.CmdReadSectorsExt, Device: 0x40},
			ata.Command{Op: ata.CmdReadSectorsExt, Addressing: ata.AddrLBA48, Count: 65536}, nil},
		{"EXT without the LBA bit is still LBA48", ata.TaskFile{Command: ata.CmdReadDMAExt, LBALow: 9, HOBLBAHigh: 1, Count: 1},
			ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 1<<40 | 9, Count: 1}, nil},
		{"count 0 of a parameter command stays 0", ata.TaskFile{Command: ata.CmdSetMultipleMode},
			ata.Command{Op: ata.CmdSetMultipleMode}, nil},
		{"HOB bytes of a 28-bit command are ignored", ata.TaskFile{Command: ata.CmdReadSectors, Count: 1, LBALow: 1, HOBLBALow: 0xFF, HOBCount: 0xFF, Device: 0x40},
			ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 1, Count: 1}, nil},
		{"CHS sector 0 is invalid", ata.TaskFile{Command: ata.CmdReadSectors, Count: 1},
			ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrCHS, Count: 1}, ata.ErrBadCHS},
		{"CHS head 15", ata.TaskFile{Command: ata.CmdReadSectors, Count: 1, LBALow: 1, Device: 0x00 | 0x0F},
			ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrCHS, Count: 1}, nil},
		{"CHS sector beyond 63", ata.TaskFile{Command: ata.CmdReadSectors, Count: 1, LBALow: 64},
			ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrCHS, Count: 1}, ata.ErrBadCHS},
		{"unknown opcode decodes raw", ata.TaskFile{Command: 0x5A, Features: 1, Count: 2, LBALow: 3, LBAMid: 4, LBAHigh: 5, Device: 0xE7},
			ata.Command{Op: 0x5A, Features: 1, Count: 2, LBA: 0x050403, Device: 0xE7}, nil},
	}
	// Head 15 is inside the default geometry (16 heads): fill in its LBA.
	tests[6].want.LBA = 15 * 63
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c ata.Command
			err := ata.Decode(&tt.tf, g, &c)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("Decode error %v, want %v", err, tt.err)
			}
			if diff := cmp.Diff(tt.want, c); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	g := ata.DefaultGeometry(1 << 20)
	tests := []struct {
		name string
		c    ata.Command
	}{
		{"LBA28 beyond 28 bits", ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, LBA: 1 << 28, Count: 1}},
		{"28-bit count 257", ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, Count: 257}},
		{"count 0", ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28}},
		{"48-bit count 65537", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, Count: 65537}},
		{"LBA48 beyond 48 bits", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 1 << 48, Count: 1}},
		{"EXT command with LBA28 addressing", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA28, Count: 1}},
		{"CHS beyond the geometry", ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrCHS, LBA: g.Sectors(), Count: 1}},
		{"address on a non-addressed command", ata.Command{Op: ata.CmdIdentifyDevice, Addressing: ata.AddrLBA28}},
		{"28-bit features above 255", ata.Command{Op: ata.CmdSetFeatures, Features: 0x100}},
		{"raw count 256 on a parameter command", ata.Command{Op: ata.CmdSetMultipleMode, Count: 256}},
		{"head bits in Device of an LBA28 command", ata.Command{Op: ata.CmdReadDMA, Addressing: ata.AddrLBA28, Count: 1, Device: 3}},
	}
	for _, tt := range tests {
		var tf ata.TaskFile
		if err := tt.c.Encode(g, &tf); !errors.Is(err, ata.ErrOutOfRange) {
			t.Errorf("%s: Encode = %v, want ErrOutOfRange", tt.name, err)
		}
	}
}

func TestDefaultGeometry(t *testing.T) {
	tests := []struct {
		sectors uint64
		want    ata.Geometry
	}{
		{0, ata.Geometry{1, 16, 63}},
		{2016, ata.Geometry{2, 16, 63}},
		{1_000_000, ata.Geometry{992, 16, 63}},
		{16514064, ata.Geometry{16383, 16, 63}},
		{1 << 40, ata.Geometry{16383, 16, 63}},
	}
	for _, tt := range tests {
		if got := ata.DefaultGeometry(tt.sectors); got != tt.want {
			t.Errorf("DefaultGeometry(%d) = %+v, want %+v", tt.sectors, got, tt.want)
		}
	}
	if got := ata.DefaultGeometry(1 << 40).Sectors(); got != 16514064 {
		t.Errorf("CHS capacity cap = %d, want 16514064", got)
	}
}

// CHS <-> LBA with the default geometry (16 heads, 63 sectors, 16383
// cylinders): LBA = (C*16 + H)*63 + S - 1.
func TestCHSGolden(t *testing.T) {
	g := ata.DefaultGeometry(1 << 30)
	tests := []struct {
		c    uint16
		h, s uint8
		lba  uint64
	}{
		{0, 0, 1, 0},
		{0, 0, 63, 62},
		{0, 1, 1, 63},
		{0, 15, 63, 1007},
		{1, 0, 1, 1008},
		{2, 3, 4, 2208},
		{1023, 15, 63, 1032191}, // the old BIOS 8.4 GB limit minus one
		{16382, 15, 63, 16514063},
	}
	for _, tt := range tests {
		lba, ok := g.LBA(tt.c, tt.h, tt.s)
		if !ok || lba != tt.lba {
			t.Errorf("LBA(%d,%d,%d) = %d,%v want %d", tt.c, tt.h, tt.s, lba, ok, tt.lba)
		}
		c, h, s, ok := g.CHS(tt.lba)
		if !ok || c != tt.c || h != tt.h || s != tt.s {
			t.Errorf("CHS(%d) = %d/%d/%d,%v want %d/%d/%d", tt.lba, c, h, s, ok, tt.c, tt.h, tt.s)
		}
	}
	for _, bad := range [][3]int{{0, 0, 0}, {0, 16, 1}, {0, 0, 64}, {16383, 0, 1}} {
		if _, ok := g.LBA(uint16(bad[0]), uint8(bad[1]), uint8(bad[2])); ok {
			t.Errorf("LBA(%v) accepted", bad)
		}
	}
	if _, _, _, ok := g.CHS(16514064); ok {
		t.Error("CHS(16514064) accepted beyond 16383 cylinders")
	}
}

// Device-to-Host FIS golden vectors (SATA 3.x §10.5.6 byte map:
// 34 I status error | lba0 lba1 lba2 dev | lba3 lba4 lba5 0 | cnt0 cnt1 0 0 | 0).
func TestGoldenD2HFIS(t *testing.T) {
	d := newTestDevice(t, testInfo(4096), &ata.BufferDMA{}) // no host: the power-on registers
	var got [ata.FISSize]byte
	d.PutD2HFIS(&got)
	if diff := cmp.Diff(unhex(t, "34 00 50 01 01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00"), got[:]); diff != "" {
		t.Errorf("power-on signature FIS (-want +got):\n%s", diff)
	}
	issue(d, ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 4000, Count: 200})
	d.PutD2HFIS(&got)
	if diff := cmp.Diff(unhex(t, "34 40 41 14 00 10 00 40 00 00 00 00 C8 00 00 00 00 00 00 00"), got[:]); diff != "" {
		t.Errorf("IDNF at LBA 4096 FIS (-want +got):\n%s", diff)
	}
}
