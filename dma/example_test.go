package dma_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"

	"github.com/nhdkit/nhd/dma"
)

// The host builds a PRD table for a 16 KiB read scattered over two buffers,
// one of which crosses a 64 KiB boundary, writes it into its memory, and
// points the bus master at it. The engine streams the data from the device
// into those buffers, computing a CRC in flight through the tap.
func Example() {
	mem := dma.Memory{Base: 0x100000, Bytes: make([]byte, 256<<10)}
	table, err := dma.BuildTable(nil,
		dma.Segment{Addr: 0x10e000, Len: 0x3000}, // crosses 0x110000
		dma.Segment{Addr: 0x120000, Len: 0x1000},
	)
	if err != nil {
		panic(err)
	}
	enc, _ := dma.AppendTable(nil, table)
	copy(mem.Bytes[0x40:], enc) // the table at physical 0x100040
	fmt.Printf("% x\n", enc[:8])
	fmt.Println(len(table), "entries")

	crc := crc32.NewIEEE()
	e, err := dma.New(dma.Config{Tap: crc})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	if err := e.LoadPRD(mem, 0x100040); err != nil {
		panic(err)
	}
	const n = 16 << 10
	fmt.Println(dma.ValidateTable(e.Table(), n))

	device := bytes.Repeat([]byte("NHD!"), 1<<20)
	if err := e.DeviceToHost(bytes.NewReader(device), 4096, n); err != nil {
		panic(err)
	}
	fmt.Printf("crc in flight %08x, of the data %08x\n", crc.Sum32(), crc32.ChecksumIEEE(device[4096:4096+n]))
	t := e.Last()
	fmt.Println(t.Sectors, "sectors,", t.Interrupts, "interrupts,", t.CopiesPerByte(), "copy per byte")
	// Output:
	// 00 e0 10 00 00 20 00 00
	// 3 entries
	// <nil>
	// crc in flight 939f3a46, of the data 939f3a46
	// 32 sectors, 2 interrupts, 1 copy per byte
}

// The same engine code on a virtual clock with the paper's timing profiles
// reproduces its front-end figures for a 64 KiB read (Table 2).
func Example_paper() {
	const n = 64 << 10
	for _, c := range []struct {
		mode   dma.Mode
		timing dma.Timing
	}{
		{dma.StoreAndForward, dma.PaperBefore()},
		{dma.Streaming, dma.PaperAfter()},
	} {
		clock := &dma.VirtualClock{}
		e, _ := dma.New(dma.Config{Mode: c.mode, Clock: clock, Timing: &c.timing})
		e.SetRegions(make([]byte, n))
		if err := e.DeviceToHost(bytes.NewReader(make([]byte, n)), 0, n); err != nil {
			panic(err)
		}
		t := e.Last()
		fmt.Printf("%-17v %v, %3d interrupts, %.2f MiB/s\n", c.mode, t.Elapsed(), t.Interrupts,
			float64(n)/(1<<20)/t.Elapsed().Seconds())
		e.Close()
	}
	// Output:
	// store-and-forward 34.31772ms, 128 interrupts, 1.82 MiB/s
	// streaming         4.76036ms,   2 interrupts, 13.13 MiB/s
}

// A PRD entry decodes strictly, or as the hardware reads it.
func ExampleDecodePRD() {
	b := []byte{0x00, 0x00, 0x01, 0x00, 0x01, 0x02, 0x00, 0x80} // odd count
	_, err := dma.DecodePRD(b)
	fmt.Println(err)
	fmt.Printf("%+v\n", dma.DecodePRDLax(b))
	// Output:
	// dma: PRD address or byte count is odd: address 0x10000, 513 bytes
	// {Addr:65536 Len:512 EOT:true}
}

// A scatter-gather list finds the pieces of a sector that straddles two
// regions.
func ExampleSGList_Sector() {
	l := dma.NewSGList(make([]byte, 700), make([]byte, 1000))
	pieces, _ := l.Sector(nil, 1) // bytes 512..1023
	for _, p := range pieces {
		fmt.Println(len(p))
	}
	r, off, _ := l.Locate(1023)
	fmt.Println("byte 1023 is in region", r, "at", off)
	// Output:
	// 188
	// 324
	// byte 1023 is in region 1 at 323
}

// queuedDevice is a device that keeps reads in flight (dma.AsyncReaderAt):
// a read is queued when started and done when waited for, as a network
// client's reply arrives later. Its handles index the queue.
type queuedDevice struct {
	*bytes.Reader
	q []struct {
		p    []byte
		off  int64
		done bool
	}
}

func (d *queuedDevice) StartReadAt(_ context.Context, p []byte, off int64) (dma.Handle, error) {
	d.q = append(d.q, struct {
		p    []byte
		off  int64
		done bool
	}{p: p, off: off})
	return dma.Handle(len(d.q) - 1), nil
}

func (d *queuedDevice) Wait(_ context.Context, h dma.Handle) error {
	if h >= dma.Handle(len(d.q)) || d.q[h].done {
		return fmt.Errorf("queuedDevice: no read %d in flight", h)
	}
	r := &d.q[h]
	r.done = true
	_, err := d.ReadAt(r.p, r.off)
	return err
}

// A 64 KiB read on the calling goroutine (Config.InlineMax), from a device
// that keeps reads in flight: the engine starts the reads of all four 16 KiB
// chunks at once, then moves each to the host as it is done.
func ExampleAsyncReaderAt() {
	const n = 64 << 10
	e, err := dma.New(dma.Config{InlineMax: n})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	host := make([]byte, n)
	e.SetRegions(host)
	data := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	dev := &queuedDevice{Reader: bytes.NewReader(data)}
	if err := e.DeviceToHost(dev, 0, n); err != nil {
		panic(err)
	}
	t := e.Last()
	fmt.Println(bytes.Equal(host, data), t.Inline, len(dev.q), "reads started,", t.Interrupts, "interrupts")
	// Output:
	// true true 4 reads started, 2 interrupts
}

// blockCache holds one 4 KiB block of a device and lends it: a minimal
// PeekReaderAt and ReserveWriterAt (a write goes straight to the device
// when it is committed).
type blockCache struct {
	dev   []byte
	block [4096]byte
	off   int64
}

func (c *blockCache) ReadAt(p []byte, off int64) (int, error) { return copy(p, c.dev[off:]), nil }

func (c *blockCache) WriteAt(p []byte, off int64) (int, error) { return copy(c.dev[off:], p), nil }

// PeekAt lends the block holding off, from off up to its end (or n).
func (c *blockCache) PeekAt(off int64, n int) ([]byte, error) {
	c.off = off / 4096 * 4096
	copy(c.block[:], c.dev[c.off:]) // a cache fill, as a read-ahead would make
	end := min(4096, int(off-c.off)+n)
	return c.block[off-c.off : end], nil
}

func (c *blockCache) ReleasePeek() {}

// ReserveAt lends the block buffer for the first bytes of the write.
func (c *blockCache) ReserveAt(off int64, n int) ([]byte, error) {
	c.off = off
	return c.block[:min(n, 4096)], nil
}

func (c *blockCache) CommitReserved(m int) error {
	copy(c.dev[c.off:], c.block[:m])
	return nil
}

// A device that holds its data in buffers of its own lends them, and the
// engine copies straight between them and host memory: a 6 KiB read that
// starts 1 KiB into a block takes two loans, and each byte is copied once.
func ExamplePeekReaderAt() {
	c := &blockCache{dev: bytes.Repeat([]byte("0123456789abcdef"), 1024)}
	e, err := dma.New(dma.Config{})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	host := make([]byte, 6<<10)
	e.SetRegions(host)
	if err := e.DeviceToHost(c, 1024, int64(len(host))); err != nil {
		panic(err)
	}
	t := e.Last()
	fmt.Println(bytes.Equal(host, c.dev[1024:1024+len(host)]), t.CopiesPerByte(), "copy per byte,", t.Copies, "copies")

	copy(host, bytes.Repeat([]byte{'w'}, len(host)))
	if err := e.HostToDevice(c, 1024, int64(len(host))); err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", c.dev[1020:1028])
	// Output:
	// true 1 copy per byte, 2 copies
	// cdefwwww
}
