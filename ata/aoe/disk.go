package aoe

import (
	"fmt"

	"github.com/nhdkit/nhd/ata"
)

// DefaultBufferCount is the number of outstanding commands a Disk
// advertises when its BufferCount is 0 (vblade's default).
const DefaultBufferCount = 16

// Disk is one shelf.slot address served by a Target: ATA devices over the
// same storage, each driven through its registers by its own ata.Host.
// With one Host, the Target runs the disk's ATA commands one at a time on
// its reading goroutine, and the outstanding ones wait in the Transport
// (a socket's receive buffer); with several, it runs up to len(Hosts) at
// once, one per Host, and queues up to BufferCount more. Each Host's Port
// must be a distinct device (settings such as SET FEATURES stay per
// device).
//
// AoE counts in 512-byte sectors, so every Host's device must have
// 512-byte logical sectors (4096-byte physical sectors are fine); NewDisk
// and Target.Serve refuse others with ErrSectorSize.
//
// Set the fields before Target.Serve and do not change them after; the
// config string, MAC mask list and reservation list are the Target's to
// change, as AoE requests ask.
type Disk struct {
	Shelf uint16
	Slot  uint8
	Hosts []*ata.Host
	// BufferCount is advertised in config replies; 0 means
	// DefaultBufferCount, and it must be at least 2 (Linux sends nothing
	// to a target that advertises fewer).
	BufferCount uint16
	// Firmware is the firmware version in config replies.
	Firmware uint16
	// Config is the initial config string (at most 1024 bytes).
	Config []byte

	mask    []MAC // MAC mask list: when not empty, only these may talk
	reserve []MAC // reservation: when not empty, only these may do I/O
	queue   chan *request
}

// NewDisk builds a Disk of n ata.Devices on backend, each with its own
// DMA engine and Host (the Host reads IDENTIFY once, so it knows the
// sector size and multiple count the device reports). It returns
// ErrSectorSize for a device whose logical sectors are not 512 bytes.
func NewDisk(shelf uint16, slot uint8, info ata.DeviceInfo, backend ata.Backend, n int) (*Disk, error) {
	if n < 1 {
		n = 1
	}
	d := &Disk{Shelf: shelf, Slot: slot}
	for range n {
		eng := &ata.BufferDMA{}
		dev, err := ata.NewDevice(ata.Config{Info: info, Backend: backend, DMA: eng})
		if err != nil {
			return nil, err
		}
		h, _, err := ata.Attach(dev, ata.BusMasterFunc(eng.Prepare))
		if err != nil {
			return nil, fmt.Errorf("aoe: identify e%d.%d: %w", shelf, slot, err)
		}
		if err := d.sectorSizeOK(h); err != nil {
			return nil, err
		}
		d.Hosts = append(d.Hosts, h)
	}
	return d, nil
}

func (d *Disk) bufferCount() int {
	if d.BufferCount == 0 {
		return DefaultBufferCount
	}
	return int(d.BufferCount)
}

func contains(list []MAC, m MAC) bool {
	for _, x := range list {
		if x == m {
			return true
		}
	}
	return false
}
