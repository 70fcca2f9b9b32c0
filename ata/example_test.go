package ata_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/nhdkit/nhd/ata"
)

// A device over a memory backend, driven by the host driver: IDENTIFY, a
// DMA write, a PIO read back.
func Example() {
	disk := newMemDisk(2048, 512)
	eng := &ata.BufferDMA{}
	dev, err := ata.NewDevice(ata.Config{
		Info:    ata.DeviceInfo{Model: "NHD Example", Serial: "EX1", Firmware: "1.0", Sectors: 2048, WriteCache: true},
		Backend: disk,
		DMA:     eng,
	})
	if err != nil {
		panic(err)
	}
	host := ata.NewHost(dev, 2048, eng)
	id, err := host.Identify()
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s, %d sectors, checksum ok %v\n", id.Model(), id.Sectors(), id.ChecksumOK())

	w, _ := ata.ReadWrite(true, 100, 2, ata.RWDMA, false)
	data := make([]byte, 1024)
	copy(data, "hello, NHD")
	if err := host.Exec(&w, data); err != nil {
		panic(err)
	}
	r, _ := ata.ReadWrite(false, 100, 2, ata.RWPIO, false)
	back := make([]byte, 1024)
	if err := host.Exec(&r, back); err != nil {
		panic(err)
	}
	fmt.Printf("%s then %s: %q\n", w.Name(), r.Name(), back[:10])
	// Output:
	// NHD Example, 2048 sectors, checksum ok true
	// WRITE DMA then READ SECTORS: "hello, NHD"
}

// Decoding a task file, as a bridge does when a command arrives.
func ExampleDecode() {
	tf := ata.TaskFile{
		Command: ata.CmdReadDMAExt,
		Count:   0x80, LBALow: 0x00, LBAMid: 0x10, LBAHigh: 0x00,
		HOBLBALow: 0x01, // LBA bits 31:24
		Device:    ata.DeviceLBA,
	}
	var c ata.Command
	if err := ata.Decode(&tf, ata.Geometry{}, &c); err != nil {
		panic(err)
	}
	fmt.Println(c.Name(), c.Protocol(), c.Addressing, c.LBA, c.Count, c.FUA())
	// Output: READ DMA EXT DMA LBA48 16781312 128 false
}

// Encoding a command into a SATA Register Host-to-Device FIS.
func ExampleCommand_Encode() {
	c := ata.Command{Op: ata.CmdWriteDMAFUAExt, Addressing: ata.AddrLBA48, LBA: 0x1234, Count: 8}
	var tf ata.TaskFile
	if err := c.Encode(ata.Geometry{}, &tf); err != nil {
		panic(err)
	}
	var fis [ata.FISSize]byte
	tf.PutFIS(&fis)
	fmt.Printf("% x\n", fis)
	// Output: 27 80 3d 00 34 12 00 40 00 00 00 00 08 00 00 00 00 00 00 00
}

// IDENTIFY data from a description; word 255 makes the 512 bytes sum to 0.
func ExampleDeviceInfo_Identify() {
	info := ata.DeviceInfo{Model: "NHD", Serial: "42", Firmware: "v1", Sectors: 1 << 29, TRIM: true, RotationRate: ata.NonRotating}
	id := info.Identify()
	b := id.Bytes()
	var sum byte
	for _, x := range b {
		sum += x
	}
	fmt.Printf("model %q LBA28 %d LBA48 %d\n", id.Model(), uint32(id[60])|uint32(id[61])<<16, id.Sectors())
	fmt.Printf("word 255 %04x, byte sum %d, TRIM %v\n", id[255], sum, id.TRIM())
	fmt.Printf("%s", id.AppendHex(nil)[:40])
	// Output:
	// model "NHD" LBA28 268435455 LBA48 536870912
	// word 255 d2a5, byte sum 0, TRIM true
	// 0040 3fff c837 0010 0000 0000 003f 0000
}

// The status the device ends in, and the host's error for it.
func ExampleError() {
	disk := newMemDisk(64, 512)
	dev, _ := ata.NewDevice(ata.Config{Info: ata.DeviceInfo{Model: "m", Sectors: 64}, Backend: disk})
	host := ata.NewHost(dev, 64, nil)
	c := ata.Command{Op: ata.CmdReadSectorsExt, Addressing: ata.AddrLBA48, LBA: 60, Count: 8}
	err := host.Exec(&c, make([]byte, 8*512))
	fmt.Println(err)
	fmt.Println(errors.Is(err, ata.ErrIDNotFound))
	c = ata.Command{Op: ata.CmdSMART, Features: 0xD0}
	fmt.Println(host.Exec(&c, nil))
	// Output:
	// ata: READ SECTORS EXT: status DRDY|ERR error IDNF|ABRT at LBA 64
	// true
	// ata: SMART: status DRDY|ERR error ABRT
}

// The state machine's table.
func ExampleTransition() {
	s := ata.StateIdle
	for _, e := range []ata.Event{ata.EvCommand, ata.EvDataIn, ata.EvBlockDone, ata.EvComplete, ata.EvComplete} {
		next, err := ata.Transition(s, e)
		fmt.Println(s, "--", e, "->", next, err)
		s = next
	}
	// Output:
	// idle -- command -> busy <nil>
	// busy -- data-in -> PIO in <nil>
	// PIO in -- block-done -> busy <nil>
	// busy -- complete -> idle <nil>
	// idle -- complete -> idle ata: no transition for complete in state idle
}

// Register level: the host writes the task file and the command, reads
// the status, and moves a 512-byte block through the 16-bit data register.
func ExampleDevice() {
	disk := newMemDisk(64, 512)
	copy(disk.data[3*512:], "sector three")
	dev, _ := ata.NewDevice(ata.Config{Info: ata.DeviceInfo{Model: "m", Sectors: 64}, Backend: disk})

	dev.WriteReg(ata.RegDevice, uint8(ata.DeviceLBA))
	dev.WriteReg(ata.RegCount, 1)
	dev.WriteReg(ata.RegLBALow, 3)
	dev.WriteReg(ata.RegLBAMid, 0)
	dev.WriteReg(ata.RegLBAHigh, 0)
	dev.WriteReg(ata.RegCommand, uint8(ata.CmdReadSectors))
	fmt.Println("INTRQ", dev.INTRQ(), "state", dev.State())
	fmt.Println("status", ata.Status(dev.ReadReg(ata.RegStatus)), "INTRQ", dev.INTRQ())
	var block [512]byte
	for i := 0; i < 512; i += 2 {
		w := dev.ReadData16()
		block[i], block[i+1] = byte(w), byte(w>>8)
	}
	fmt.Printf("%q\n", block[:12])
	fmt.Println("status", ata.Status(dev.ReadReg(ata.RegAltStatus)), "state", dev.State())

	// The same device refuses an unsupported command.
	dev.WriteReg(ata.RegCommand, uint8(ata.CmdSMART))
	fmt.Println("status", ata.Status(dev.ReadReg(ata.RegStatus)), "error", ata.ErrorBits(dev.ReadReg(ata.RegError)))
	// Output:
	// INTRQ true state PIO in
	// status DRDY|DSC|DRQ INTRQ false
	// "sector three"
	// status DRDY|DSC state idle
	// status DRDY|ERR error ABRT
}

// lateDisk accepts writes into a cache and writes them out later; one of
// them, to sector 42, fails after it was accepted, and the next flush says
// so with an *ata.OffsetError.
type lateDisk struct {
	*memDisk
	failed int64 // byte offset of a write that failed after it was accepted, or -1
}

func (d *lateDisk) WriteAt(p []byte, off int64) (int, error) {
	if off <= 42*512 && 42*512 < off+int64(len(p)) {
		d.failed = 42 * 512 // accepted now, fails later
	}
	return d.memDisk.WriteAt(p, off)
}

func (d *lateDisk) Flush(ctx context.Context) error {
	if d.failed >= 0 {
		err := &ata.OffsetError{Off: d.failed, Err: errors.New("cache: write-back failed")}
		d.failed = -1
		return err
	}
	return d.memDisk.Flush(ctx)
}

// A backend that fails a write after it has accepted it reports where with
// an OffsetError: the host's FLUSH CACHE ends in a device fault with the
// LBA of the write that failed.
func ExampleOffsetError() {
	disk := &lateDisk{memDisk: newMemDisk(1024, 512), failed: -1}
	eng := &ata.BufferDMA{}
	dev, _ := ata.NewDevice(ata.Config{Info: ata.DeviceInfo{Model: "m", Sectors: 1024, WriteCache: true}, Backend: disk, DMA: eng})
	host := ata.NewHost(dev, 1024, eng)
	w, _ := ata.ReadWrite(true, 40, 4, ata.RWDMA, false)
	fmt.Println("write:", host.Exec(&w, make([]byte, 4*512)))
	fmt.Println("flush:", host.Flush())
	// Output:
	// write: <nil>
	// flush: ata: FLUSH CACHE EXT: status DRDY|DF|ERR error ABRT at LBA 42
}
