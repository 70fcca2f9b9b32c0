package ata_test

import (
	"errors"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// offsetLog is a Backend that reads zeros and records the sectors written.
type offsetLog struct{ writes []int64 }

func (z *offsetLog) ReadAt(p []byte, off int64) (int, error) { clear(p); return len(p), nil }
func (z *offsetLog) WriteAt(p []byte, off int64) (int, error) {
	for i := 0; i < len(p); i += 512 {
		z.writes = append(z.writes, off/512+int64(i/512))
	}
	return len(p), nil
}

// A 28-bit command reaches only the 0FFFFFFFh sectors IDENTIFY words
// 60-61 report (LBA 0..0FFFFFFEh), however large the device: past them it
// fails with IDNF|ABRT and the first sector out of reach, and nothing is
// written. READ NATIVE MAX ADDRESS agrees with words 60-61. Before, a
// 28-bit WRITE at 0FFFFFFFh of 256 sectors wrote sectors up to 2^28+254.
func TestLBA28Reach(t *testing.T) {
	z := &offsetLog{}
	dev, err := ata.NewDevice(ata.Config{Info: ata.DeviceInfo{Sectors: 1 << 30}, Backend: z, DMA: &ata.BufferDMA{}})
	if err != nil {
		t.Fatal(err)
	}
	h, id, err := ata.Attach(dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := uint32(id[60]) | uint32(id[61])<<16; w != ata.MaxLBA28 {
		t.Fatalf("words 60-61 = %#x", w)
	}
	for _, tc := range []struct {
		op         ata.Opcode
		lba        uint64
		count      uint32
		failingLBA uint64 // 0: the command succeeds
	}{
		{ata.CmdWriteSectors, ata.MaxLBA28, 256, ata.MaxLBA28},
		{ata.CmdWriteSectors, ata.MaxLBA28, 1, ata.MaxLBA28},
		{ata.CmdWriteSectors, ata.MaxLBA28 - 255, 256, ata.MaxLBA28},
		{ata.CmdReadSectors, ata.MaxLBA28, 1, ata.MaxLBA28},
		{ata.CmdReadVerifySectors, ata.MaxLBA28, 1, ata.MaxLBA28},
		{ata.CmdSeek, ata.MaxLBA28, 0, ata.MaxLBA28},
		{ata.CmdWriteSectors, ata.MaxLBA28 - 1, 1, 0},
		{ata.CmdWriteSectorsExt, ata.MaxLBA28, 256, 0},
	} {
		z.writes = nil
		addr := ata.AddrLBA28
		if tc.op.Ext() {
			addr = ata.AddrLBA48
		}
		c := ata.Command{Op: tc.op, Addressing: addr, LBA: tc.lba, Count: tc.count}
		err := h.Exec(&c, make([]byte, c.Bytes(512)))
		var ae *ata.Error
		switch {
		case tc.failingLBA == 0 && err != nil:
			t.Errorf("%v at %#x+%d: %v", tc.op, tc.lba, tc.count, err)
		case tc.failingLBA != 0 && (!errors.As(err, &ae) || ae.Err != ata.ErrorIDNF|ata.ErrorABRT || ae.LBA != tc.failingLBA):
			t.Errorf("%v at %#x+%d: %v, want IDNF|ABRT at %#x", tc.op, tc.lba, tc.count, err, tc.failingLBA)
		case tc.failingLBA != 0 && len(z.writes) > 0:
			t.Errorf("%v at %#x+%d wrote sectors %#x..%#x", tc.op, tc.lba, tc.count, z.writes[0], z.writes[len(z.writes)-1])
		}
	}
	for ext, want := range map[bool]uint64{false: ata.MaxLBA28 - 1, true: 1<<30 - 1} {
		if got, err := h.ReadNativeMax(ext); err != nil || got != want {
			t.Errorf("READ NATIVE MAX (ext %v) = %#x, %v; want %#x", ext, got, err, want)
		}
	}
}
