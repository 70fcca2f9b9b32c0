package ata_test

import (
	"errors"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

// tb is what the helpers need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// plainInfo is testInfo without TRIM, for a device over a backend without
// Trim or without a DMA engine (NewDevice refuses TRIM there).
func plainInfo(sectors uint64) ata.DeviceInfo {
	info := testInfo(sectors)
	info.TRIM = false
	return info
}

func testInfo(sectors uint64) ata.DeviceInfo {
	return ata.DeviceInfo{
		Model: "NHD Test Disk", Serial: "SN-0001", Firmware: "FW1",
		Sectors: sectors, TRIM: true, WriteCache: true, RotationRate: ata.NonRotating,
	}
}

type rig struct {
	dev  *ata.Device
	disk *memDisk
	eng  *ata.BufferDMA
	host *ata.Host
	irqs int // interrupts raised
}

// newRig builds a device over a memDisk with a BufferDMA engine and a host
// driver for it.
func newRig(t tb, info ata.DeviceInfo) *rig {
	t.Helper()
	ss := info.LogicalSectorSize
	if ss == 0 {
		ss = 512
	}
	r := &rig{disk: newMemDisk(int(info.Sectors), ss), eng: &ata.BufferDMA{}}
	d, err := ata.NewDevice(ata.Config{Info: info, Backend: r.disk, DMA: r.eng, Interrupt: func() { r.irqs++ }})
	if err != nil {
		t.Fatal(err)
	}
	r.dev = d
	r.host = attach(t, d, r.eng)
	r.irqs = 0 // the IDENTIFY of Attach's
	return r
}

// attach returns ata.Attach's host driver for p or fails.
func attach(t tb, p ata.Port, bm ata.BusMaster) *ata.Host {
	t.Helper()
	h, _, err := ata.Attach(p, bm)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newTestDevice(t testing.TB, info ata.DeviceInfo, dma ata.DMA) *ata.Device {
	t.Helper()
	d, err := ata.NewDevice(ata.Config{Info: info, Backend: newMemDisk(int(info.Sectors), 512), DMA: dma})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func asTransition(err error, te **ata.TransitionError) bool { return errors.As(err, te) }

// ataErr returns err as an *ata.Error or fails.
func ataErr(t tb, err error) *ata.Error {
	t.Helper()
	var e *ata.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *ata.Error", err, err)
	}
	return e
}
