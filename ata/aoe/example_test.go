package aoe_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/nbd"
)

var (
	targetMAC = aoe.MAC{0x02, 0, 0, 0, 0xAE, 0x01}
	hostMAC   = aoe.MAC{0x02, 0, 0, 0, 0xAE, 0x02}
)

// chanTransport is a Transport in memory: frames sent to the target go
// into in, the target's frames come out of out.
type chanTransport struct {
	in, out chan []byte
	done    chan struct{}
}

func (c *chanTransport) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-c.in:
		return copy(b, f), nil
	case <-c.done:
		return 0, aoe.ErrClosed
	}
}

func (c *chanTransport) WriteFrame(b []byte) error {
	c.out <- slices.Clone(b) // the Target reuses b
	return nil
}

func (c *chanTransport) MAC() aoe.MAC { return targetMAC }
func (c *chanTransport) MTU() int     { return 1500 }
func (c *chanTransport) Close() error { close(c.done); return nil }

// request is a host's frame to shelf 0, slot 1 with argument arg.
func request(cmd aoe.Command, tag uint32, arg []byte) []byte {
	f := make([]byte, aoe.HeaderSize)
	h := aoe.Header{Dst: targetMAC, Src: hostMAC, Version: aoe.Version, Major: 0, Minor: 1, Command: cmd, Tag: tag}
	h.Put(f)
	return append(f, arg...)
}

// A Target serves disk e0.1, a memory disk behind one ATA device, as a
// Linux host's aoe driver would meet it: it announces the disk, answers a
// query config request, and runs an ATA write and read through the
// device's registers. A real target's Transport is ListenPacket (an
// Ethernet interface) or ListenUnixgram (QEMU's -netdev dgram).
func ExampleTarget() {
	disk, err := aoe.NewDisk(0, 1, ata.DeviceInfo{Model: "example", Serial: "E01", Firmware: "1.0", Sectors: 2048}, nbd.NewMemDisk(1<<20), 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	tr := &chanTransport{in: make(chan []byte, 4), out: make(chan []byte, 4), done: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- (&aoe.Target{Transport: tr, Disks: []*aoe.Disk{disk}}).Serve(ctx) }()

	var h aoe.Header
	var c aoe.ConfigArg
	announce := <-tr.out
	if aoe.ParseHeader(announce, &h) == nil && aoe.ParseConfigArg(announce, &c) == nil {
		fmt.Printf("announced e%d.%d to %v, %d buffers\n", h.Major, h.Minor, h.Dst == aoe.BroadcastMAC, c.BufferCount)
	}

	// WRITE SECTOR(S) EXT of one sector at LBA 7, then READ SECTOR(S) EXT.
	sector := make([]byte, 512)
	copy(sector, "hello, AoE")
	arg := make([]byte, aoe.ATADataOffset)
	(&aoe.ATAArg{Flags: aoe.ATAExtended | aoe.ATAWrite, SectorCount: 1, CmdStatus: 0x34, LBA: 7}).Put(arg)
	tr.in <- request(aoe.CmdATA, 1, append(arg[aoe.HeaderSize:], sector...))
	var a aoe.ATAArg
	reply := <-tr.out
	if aoe.ParseHeader(reply, &h) == nil && aoe.ParseATAArg(reply, &a) == nil {
		fmt.Printf("write: tag %d, status %#02x\n", h.Tag, a.CmdStatus)
	}
	(&aoe.ATAArg{Flags: aoe.ATAExtended, SectorCount: 1, CmdStatus: 0x24, LBA: 7}).Put(arg)
	tr.in <- request(aoe.CmdATA, 2, arg[aoe.HeaderSize:])
	reply = <-tr.out
	if aoe.ParseHeader(reply, &h) == nil && aoe.ParseATAArg(reply, &a) == nil {
		fmt.Printf("read: tag %d, status %#02x, %q\n", h.Tag, a.CmdStatus, reply[aoe.ATADataOffset:][:10])
	}

	stop()
	if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Println(err)
	}
	// Output:
	// announced e0.1 to true, 16 buffers
	// write: tag 1, status 0x50
	// read: tag 2, status 0x50, "hello, AoE"
}

// A Header and an ATAArg put into a frame parse back to themselves; the
// argument starts after the 24 bytes of the Ethernet and AoE headers.
func ExampleParseATAArg() {
	frame := make([]byte, aoe.ATADataOffset)
	(&aoe.Header{Dst: targetMAC, Src: hostMAC, Version: aoe.Version, Major: 3, Minor: 9, Command: aoe.CmdATA, Tag: 0xCAFE}).Put(frame)
	(&aoe.ATAArg{Flags: aoe.ATAExtended, SectorCount: 2, CmdStatus: 0x24, LBA: 0x123456}).Put(frame)
	fmt.Printf("% x\n", frame[aoe.HeaderSize:aoe.ATADataOffset])

	var h aoe.Header
	var a aoe.ATAArg
	if err := errors.Join(aoe.ParseHeader(frame, &h), aoe.ParseATAArg(frame, &a)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("e%d.%d tag %#x: opcode %#x, %d sectors at LBA %#x\n", h.Major, h.Minor, h.Tag, a.CmdStatus, a.SectorCount, a.LBA)
	fmt.Println(aoe.ParseATAArg(frame[:30], &a))
	// Output:
	// 40 00 02 24 56 34 12 00 00 00 00 00
	// e3.9 tag 0xcafe: opcode 0x24, 2 sectors at LBA 0x123456
	// aoe: frame too short
}
