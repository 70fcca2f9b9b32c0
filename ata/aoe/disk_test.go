package aoe

import (
	"errors"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// A device with 4096-byte logical sectors cannot serve AoE's 512-byte
// sectors: NewDisk refuses it, and so does Serve for a Disk built by hand.
// Before, both accepted it and every read failed with a device fault.
func TestDiskSectorSize(t *testing.T) {
	mem := &memBackend{data: make([]byte, testSectors*4096)}
	info := testInfo()
	info.LogicalSectorSize = 4096
	if _, err := NewDisk(0, 1, info, mem, 1); !errors.Is(err, ErrSectorSize) {
		t.Errorf("NewDisk: %v, want ErrSectorSize", err)
	}
	dev, err := ata.NewDevice(ata.Config{Info: info, Backend: mem})
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := ata.Attach(dev, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := &Target{Transport: newPipe(1500), Disks: []*Disk{{Slot: 1, Hosts: []*ata.Host{h}}}}
	if err := tg.Serve(t.Context()); !errors.Is(err, ErrSectorSize) {
		t.Errorf("Serve: %v, want ErrSectorSize", err)
	}
	// 4096-byte physical sectors over 512-byte logical ones are fine.
	info.LogicalSectorSize, info.PhysicalSectorSize = 512, 4096
	if _, err := NewDisk(0, 1, info, mem, 1); err != nil {
		t.Errorf("NewDisk with 4K physical sectors: %v", err)
	}
}
