package aoe

import (
	"errors"
	"fmt"

	"github.com/nhdkit/nhd/ata"
)

// Errors of a Target and its Disks that cannot be served, returned by
// Target.Serve (wrapped, with the details) before it serves a frame.
var (
	// ErrConfig is a Target without a Transport or a Disk, with an MTU
	// too small for one sector, or with two Disks at the same shelf.slot
	// (an initiator would take them for two paths to one disk).
	ErrConfig = errors.New("aoe: invalid target configuration")
	// ErrDisk is a Disk without an ata.Host, with a buffer count below 2,
	// at a broadcast or reserved address (shelf FFFFh or 0FFFh, slot
	// FFh), or with a config string over 1024 bytes.
	ErrDisk = errors.New("aoe: invalid disk")
	// ErrSectorSize is a Disk whose device has logical sectors other
	// than 512 bytes: AoE's sector count is in 512-byte units, and such a
	// device would fail every read and write. NewDisk returns it too.
	ErrSectorSize = errors.New("aoe: logical sector size is not 512 bytes")
)

// validate checks t and its disks before Serve uses them.
func (t *Target) validate() error {
	if t.Transport == nil || len(t.Disks) == 0 {
		return fmt.Errorf("%w: needs a transport and a disk", ErrConfig)
	}
	for i, d := range t.Disks {
		if err := d.validate(); err != nil {
			return err
		}
		for _, e := range t.Disks[:i] {
			if e.Shelf == d.Shelf && e.Slot == d.Slot {
				return fmt.Errorf("%w: two disks at e%d.%d", ErrConfig, d.Shelf, d.Slot)
			}
		}
	}
	return nil
}

func (d *Disk) validate() error {
	switch {
	case len(d.Hosts) == 0:
		return fmt.Errorf("%w: e%d.%d has no ATA host", ErrDisk, d.Shelf, d.Slot)
	case d.bufferCount() < 2:
		return fmt.Errorf("%w: e%d.%d: buffer count %d below 2", ErrDisk, d.Shelf, d.Slot, d.BufferCount)
	case d.Shelf == BroadcastMajor || d.Shelf == 0x0FFF || d.Slot == BroadcastMinor:
		return fmt.Errorf("%w: e%d.%d is a broadcast or reserved address", ErrDisk, d.Shelf, d.Slot)
	case len(d.Config) > MaxConfigString:
		return fmt.Errorf("%w: e%d.%d: config string of %d bytes, over 1024", ErrDisk, d.Shelf, d.Slot, len(d.Config))
	}
	for _, h := range d.Hosts {
		if err := d.sectorSizeOK(h); err != nil {
			return err
		}
	}
	return nil
}

// sectorSizeOK checks that h's device has 512-byte logical sectors.
func (d *Disk) sectorSizeOK(h *ata.Host) error {
	if h.SectorSize != 0 && h.SectorSize != SectorSize {
		return fmt.Errorf("%w: e%d.%d has %d-byte sectors", ErrSectorSize, d.Shelf, d.Slot, h.SectorSize)
	}
	return nil
}
