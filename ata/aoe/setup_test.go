package aoe

import (
	"errors"
	"testing"
)

// Every setup Serve refuses matches a sentinel through errors.Is, and
// two Disks at one shelf.slot are refused (a broadcast query got two
// replies for one address, while ATA commands went to the first disk).
func TestTargetSetupErrors(t *testing.T) {
	disk := func(shelf uint16, slot uint8) *Disk {
		d, err := NewDisk(shelf, slot, testInfo(), &memBackend{data: make([]byte, testSectors*512)}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	withConfig := disk(0, 3)
	withConfig.Config = make([]byte, MaxConfigString+1)
	withBufcnt := disk(0, 4)
	withBufcnt.BufferCount = 1
	for _, tc := range []struct {
		name string
		tr   Transport
		d    []*Disk
		want error
	}{
		{"no transport", nil, []*Disk{disk(0, 1)}, ErrConfig},
		{"no disk", newPipe(1500), nil, ErrConfig},
		{"MTU below one sector", newPipe(500), []*Disk{disk(0, 1)}, ErrConfig},
		{"same shelf.slot twice", newPipe(1500), []*Disk{disk(0, 1), disk(0, 2), disk(0, 1)}, ErrConfig},
		{"no host", newPipe(1500), []*Disk{{Slot: 1}}, ErrDisk},
		{"buffer count 1", newPipe(1500), []*Disk{withBufcnt}, ErrDisk},
		{"broadcast slot", newPipe(1500), []*Disk{disk(0, BroadcastMinor)}, ErrDisk},
		{"shelf 0FFFh", newPipe(1500), []*Disk{disk(0x0FFF, 1)}, ErrDisk},
		{"config string over 1024", newPipe(1500), []*Disk{withConfig}, ErrDisk},
	} {
		tg := &Target{Transport: tc.tr, Disks: tc.d}
		if err := tg.Serve(t.Context()); !errors.Is(err, tc.want) {
			t.Errorf("%s: Serve returned %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := (&Target{Transport: newPipe(1500), Disks: []*Disk{disk(0, 1), disk(1, 1)}}).init(); err != nil {
		t.Errorf("two disks at e0.1 and e1.1: %v", err)
	}
}
