package ata_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
	"pgregory.net/rapid"
)

func geometryGen() *rapid.Generator[ata.Geometry] {
	return rapid.Custom(func(t *rapid.T) ata.Geometry {
		return ata.Geometry{
			Cylinders:       uint16(rapid.IntRange(1, 65535).Draw(t, "cyl")),
			Heads:           uint8(rapid.IntRange(1, 16).Draw(t, "heads")),
			SectorsPerTrack: uint8(rapid.IntRange(1, 255).Draw(t, "spt")),
		}
	})
}

// commandGen draws a valid Command for any opcode, named or not.
func commandGen(g ata.Geometry) *rapid.Generator[ata.Command] {
	return rapid.Custom(func(t *rapid.T) ata.Command {
		op := ata.Opcode(rapid.IntRange(0, 255).Draw(t, "op"))
		c := ata.Command{Op: op}
		ext := op.Ext()
		maxCount, maxFeat, maxRaw := uint32(256), 255, uint64(0xFFFFFF)
		if ext {
			maxCount, maxFeat, maxRaw = 65536, 65535, ata.MaxLBA48
		}
		if op.Counted() {
			c.Count = rapid.Uint32Range(1, maxCount).Draw(t, "count")
		} else {
			c.Count = rapid.Uint32Range(0, maxCount-1).Draw(t, "raw count")
		}
		c.Features = uint16(rapid.IntRange(0, maxFeat).Draw(t, "features"))
		dev := ata.DeviceBits(rapid.IntRange(0, 255).Draw(t, "device"))
		switch {
		case !op.Addressed():
			c.Addressing, c.Device = ata.AddrNone, dev
			c.LBA = rapid.Uint64Range(0, maxRaw).Draw(t, "raw lba")
		case ext:
			c.Addressing, c.Device = ata.AddrLBA48, dev&^ata.DeviceLBA
			c.LBA = rapid.Uint64Range(0, ata.MaxLBA48).Draw(t, "lba48")
		case rapid.Bool().Draw(t, "chs"):
			c.Addressing, c.Device = ata.AddrCHS, dev&^(ata.DeviceLBA|ata.DeviceHeadMask)
			c.LBA = rapid.Uint64Range(0, g.Sectors()-1).Draw(t, "chs lba")
		default:
			c.Addressing, c.Device = ata.AddrLBA28, dev&^(ata.DeviceLBA|ata.DeviceHeadMask)
			c.LBA = rapid.Uint64Range(0, ata.MaxLBA28).Draw(t, "lba28")
		}
		return c
	})
}

// Decode(Encode(c)) == c for every command, and the task file survives the
// FIS.
func TestRoundTripCommand(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := geometryGen().Draw(t, "geometry")
		c := commandGen(g).Draw(t, "command")
		var tf ata.TaskFile
		if err := c.Encode(g, &tf); err != nil {
			t.Fatalf("Encode(%+v): %v", c, err)
		}
		var fis [ata.FISSize]byte
		tf.PutFIS(&fis)
		var back ata.TaskFile
		if err := back.ParseFIS(fis[:]); err != nil {
			t.Fatal(err)
		}
		if back != tf {
			t.Fatalf("FIS round trip:\n%s", cmp.Diff(tf, back))
		}
		var d ata.Command
		if err := ata.Decode(&back, g, &d); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d != c {
			t.Fatalf("round trip (-want +got):\n%s", cmp.Diff(c, d))
		}
	})
}

// Any task file that decodes re-encodes to one that decodes the same.
func TestRoundTripTaskFile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := geometryGen().Draw(t, "geometry")
		b := rapid.SliceOfN(rapid.Byte(), ata.FISSize, ata.FISSize).Draw(t, "fis")
		b[0] = ata.FISTypeRegH2D
		var tf ata.TaskFile
		if err := tf.ParseFIS(b); err != nil {
			t.Fatal(err)
		}
		var c ata.Command
		if err := ata.Decode(&tf, g, &c); err != nil {
			return // a CHS address outside g
		}
		var tf2 ata.TaskFile
		if err := c.Encode(g, &tf2); err != nil {
			t.Fatalf("Encode(Decode(%+v)) = %v", tf, err)
		}
		var c2 ata.Command
		if err := ata.Decode(&tf2, g, &c2); err != nil || c2 != c {
			t.Fatalf("second decode %v (-first +second):\n%s", err, cmp.Diff(c, c2))
		}
	})
}

// CHS and LBA are inverse over the whole geometry.
func TestRoundTripCHS(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g := geometryGen().Draw(t, "geometry")
		lba := rapid.Uint64Range(0, g.Sectors()-1).Draw(t, "lba")
		c, h, s, ok := g.CHS(lba)
		if !ok {
			t.Fatalf("CHS(%d) not ok in %+v", lba, g)
		}
		back, ok := g.LBA(c, h, s)
		if !ok || back != lba {
			t.Fatalf("LBA(CHS(%d)) = %d, %v", lba, back, ok)
		}
	})
}

// ReadWrite picks opcodes by libata's rule.
func TestReadWrite(t *testing.T) {
	tests := []struct {
		write bool
		lba   uint64
		n     uint32
		mode  ata.RWMode
		fua   bool
		want  ata.Opcode
	}{
		{false, 0, 256, ata.RWDMA, false, ata.CmdReadDMA},
		{false, 0, 257, ata.RWDMA, false, ata.CmdReadDMAExt},
		{false, 1<<28 - 2, 1, ata.RWPIO, false, ata.CmdReadSectorsExt}, // block+n == 2^28-1 is not < 2^28-1
		{false, 1<<28 - 3, 1, ata.RWPIO, false, ata.CmdReadSectors},
		{true, 5, 8, ata.RWPIOMultiple, false, ata.CmdWriteMultiple},
		{true, 5, 8, ata.RWDMA, true, ata.CmdWriteDMAFUAExt},
		{true, 5, 8, ata.RWPIOMultiple, true, ata.CmdWriteMultipleFUAExt},
	}
	for _, tt := range tests {
		c, err := ata.ReadWrite(tt.write, tt.lba, tt.n, tt.mode, tt.fua)
		if err != nil || c.Op != tt.want || c.LBA != tt.lba || c.Count != tt.n {
			t.Errorf("ReadWrite(%v,%d,%d,%d,%v) = %+v, %v; want %v", tt.write, tt.lba, tt.n, tt.mode, tt.fua, c, err, tt.want)
		}
	}
	for _, bad := range []struct {
		write bool
		n     uint32
		mode  ata.RWMode
		fua   bool
	}{{false, 1, ata.RWDMA, true}, {true, 1, ata.RWPIO, true}, {true, 0, ata.RWDMA, false}, {true, 65537, ata.RWDMA, false}} {
		if _, err := ata.ReadWrite(bad.write, 0, bad.n, bad.mode, bad.fua); err == nil {
			t.Errorf("ReadWrite(%+v) accepted", bad)
		}
	}
}
