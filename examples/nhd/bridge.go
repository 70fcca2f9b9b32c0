package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/checksum"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/nbd"
)

// A variant is one datapath of the bridge: the four choices the paper's
// optimisations make, each of which the report measures on and off.
type variant struct {
	Name string `json:"name"`
	// Streaming moves the data phase through the FIFO with the producer
	// and the consumer overlapped (dma.Streaming); off, one sector at a
	// time with a handshake per sector (dma.StoreAndForward).
	Streaming bool `json:"streaming"`
	// ZeroCopy reads NBD data straight into the FIFO and writes it
	// straight from it; off, the data is staged through a bridge buffer
	// the size of the command (one more copy of every byte).
	ZeroCopy bool `json:"zero_copy"`
	// InFlight computes the checksum by the DMA engine's tap as the data
	// moves; off, by a separate pass over the data after it has moved.
	InFlight bool `json:"checksum_in_flight"`
	// Pipelined overlaps the back end (NBD requests) with the front end
	// (the DMA to the host) in chunks of the command; off, the whole
	// command is read from NBD before the DMA starts (or DMA'd before it is
	// written), the paper's synchronous cascade.
	Pipelined bool `json:"pipelined"`
	// Ahead pipelines the two ends across commands instead: while the
	// front end DMAs one command to the host, the back end already reads
	// the next sequential block (read-ahead), and a write completes once
	// its data is in the bridge's memory, the NBD write running while the
	// host prepares the next (write-behind, behind the device's volatile
	// write cache; FLUSH CACHE waits for it). The data is staged through
	// the bridge's buffers, so this gives up zero-copy.
	Ahead bool `json:"ahead"`
}

// The paper's Table 4 goes from "before" to "after"; the report adds one
// optimisation per row so each row's speed-up is that optimisation's.
var variants = []variant{
	{Name: "store-and-forward"},
	{Name: "+ DMA streaming", Streaming: true},
	{Name: "+ zero-copy", Streaming: true, ZeroCopy: true},
	{Name: "+ checksum in flight", Streaming: true, ZeroCopy: true, InFlight: true},
	{Name: "+ pipelined in chunks", Streaming: true, ZeroCopy: true, InFlight: true, Pipelined: true},
	{Name: "+ pipelined across commands", Streaming: true, InFlight: true, Pipelined: true, Ahead: true},
}

// bridgeFor is the bridge the workload runs on: DMA streaming, zero-copy
// and the checksum in flight, with the front and back ends in series, or
// pipelined in chunks when asked (on a machine where an NBD request costs
// more than the front end's share of a chunk, that is slower; the table
// says which).
func bridgeFor(pipelined bool) variant {
	if pipelined {
		return variants[5]
	}
	return variants[3]
}

// defaultChunk is the piece of a command the bridge pipelined in chunks
// moves at a time: one NBD request, overlapped with the DMA of the piece
// before it. Every request has a fixed cost (about 10 us on loopback here)
// that a chunk's share of the front end (a few us) cannot hide, so the
// fewer requests the better: 32 KiB, two per 64 KiB command, measured
// x0.71-0.74 of the series bridge where 16 KiB measured x0.40-0.45 (README).
const defaultChunk = 32 << 10

// defaultSpin is how long the DMA engine's two sides spin for each other
// before they park (dma.Config.Spin). The NBD client's request and its
// reply reader need the processor while the engine waits on them, so on
// a machine with few cores a short spin is best; see the README for the
// measurements.
const defaultSpin = dma.DefaultSpin

// defaultAhead is how many NBD requests the bridge pipelined across
// commands keeps in flight (read-ahead, write-behind), all from the drive's
// goroutine: with a few, the server works on the next while the drive
// works on this one. Measured, one Table 4 run each on a quiet machine,
// that bridge over the series one at -ahead 2, 3, 4 and 6: x1.00 / x1.02,
// x1.19 / x1.13, x0.97 / x1.14 and x0.97 / x1.14 (reads / writes; README).
const defaultAhead = 3

// tuning is what a drive's datapath can be tuned by.
type tuning struct {
	Chunk int           // bytes per NBD request in the variant pipelined in chunks
	Spin  time.Duration // the DMA engine's spin (dma.Config.Spin)
	// Ahead is the number of NBD requests the variant pipelined across
	// commands keeps in flight.
	Ahead int
	// Overlap runs every streaming transfer on the DMA engine's worker;
	// off, a transfer the size of a command that has nothing to overlap
	// with the back end runs on the drive's goroutine (dma.Config.InlineMax).
	Overlap bool
}

var defaultTuning = tuning{Chunk: defaultChunk, Spin: defaultSpin, Ahead: defaultAhead}

// A drive is one emulated NHD: an ATA device whose backend is the NBD
// client (or, to measure the front end alone, a memory disk), with a DMA
// engine moving its data phase through a sector FIFO into host memory, the
// checksum computed on the way, and the host-side driver that issues
// commands through its registers. A drive is used by one goroutine.
type drive struct {
	v      variant
	bs     int // largest command in bytes
	eng    *dma.Engine
	dev    *ata.Device
	host   *ata.Host
	path   dmaPath
	closed bool
}

// newDrive builds a drive over backend be for commands of up to bs bytes.
func newDrive(v variant, be ata.Backend, sectors uint64, bs int, tu tuning) (*drive, error) {
	chunk := tu.Chunk
	d := &drive{v: v, bs: bs}
	d.path.d = d
	cfg := dma.Config{Mode: dma.StoreAndForward}
	switch {
	case !v.Streaming:
	case !v.ZeroCopy:
		// The paper's DMA streaming: the CPU feeds a small FIFO from its
		// memory while the FIFO drains to the host.
		cfg.Mode = dma.Streaming
	case !v.Pipelined:
		// Zero-copy, series: the whole command in one NBD request straight
		// into a FIFO that holds it, then to the host.
		cfg = dma.Config{Mode: dma.Streaming, FIFOBlocks: bs / dma.SectorSize, ChunkSectors: bs / dma.SectorSize}
	default:
		// Pipelined: NBD requests of chunk bytes straight into the FIFO,
		// each overlapped with the DMA of the one before. The FIFO holds
		// the command, or as many chunks as may be in flight at once.
		c := max(1, min(bs, chunk)/dma.SectorSize)
		cfg = dma.Config{Mode: dma.Streaming, FIFOBlocks: min(bs/dma.SectorSize, maxAhead*c), ChunkSectors: c}
	}
	cfg.Spin = tu.Spin
	if v.Streaming && !tu.Overlap {
		// On the drive's goroutine: a 64 KiB copy (about 2 us) costs less
		// than waking the engine's worker on the other core (about 10 us
		// on a 2-vCPU VM), and the hand-off slowed the NBD request after
		// it by as much again (README). Pipelined in chunks, the NBD
		// client keeps the chunks' requests in flight while the engine
		// moves the ones before them (dma.AsyncReaderAt).
		cfg.InlineMax = int64(bs)
		if v.Pipelined && !v.Ahead {
			if st, ok := be.(starter); ok {
				d.path.async = newAsyncBackend(st, cfg.FIFOBlocks/cfg.ChunkSectors)
			}
		}
	}
	if v.InFlight {
		cfg.Tap = &d.path.sum
	}
	switch {
	case v.Ahead:
		d.path.ahead = newAhead(be, bs, tu.Ahead)
		be = &cachedBackend{Backend: be, a: d.path.ahead}
	case !v.ZeroCopy:
		d.path.stage = make([]byte, bs)
	}
	eng, err := dma.New(cfg)
	if err != nil {
		if d.path.ahead != nil {
			d.path.ahead.close()
		}
		return nil, err
	}
	d.eng = eng
	d.path.eng = eng
	dev, err := ata.NewDevice(ata.Config{
		Info: ata.DeviceInfo{
			Model:        "nhd software NHD",
			Serial:       "NHD0001",
			Firmware:     "1.0",
			Sectors:      sectors,
			RotationRate: ata.NonRotating,
			// A volatile write cache, as on any disk: a write completes
			// when the NBD server has acknowledged it, and FLUSH CACHE
			// makes the server flush. Without it the device would
			// flush after every write.
			WriteCache: true,
		},
		Backend: be,
		DMA:     &d.path,
	})
	if err != nil {
		d.Close()
		return nil, err
	}
	d.dev = dev
	// The engine is the host driver's bus master itself (dma.Engine.Prepare
	// points it at each command's buffer).
	d.host = ata.NewHost(dev, sectors, eng)
	return d, nil
}

// Close stops the drive's DMA engine and its read-ahead worker (after the
// write it may have in flight).
func (d *drive) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var err error
	if a := d.path.ahead; a != nil {
		err = a.close()
	}
	if e := d.eng.Close(); err == nil {
		err = e
	}
	return err
}

// exec runs one READ DMA EXT or WRITE DMA EXT of len(buf) bytes at byte
// offset off through the registers and returns the checksum the bridge
// computed over the data.
func (d *drive) exec(write bool, off int64, buf []byte) (uint16, error) {
	c := ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: uint64(off) / 512, Count: uint32(len(buf) / 512)}
	if write {
		c.Op = ata.CmdWriteDMAExt
	}
	if err := d.host.Exec(&c, buf); err != nil {
		if be := d.dev.BackendErr(); be != nil {
			return 0, fmt.Errorf("%v at byte %d: %w (bridge: %v)", c.Op, off, err, be)
		}
		return 0, fmt.Errorf("%v at byte %d: %w", c.Op, off, err)
	}
	return d.path.last, nil
}

// flush runs FLUSH CACHE EXT: the NBD server flushes what it has
// acknowledged.
func (d *drive) flush() error {
	c := ata.Command{Op: ata.CmdFlushCacheExt}
	if err := d.host.Exec(&c, nil); err != nil {
		return fmt.Errorf("%v: %w", c.Op, err)
	}
	return nil
}

// dmaPath is the drive's DMA as the ATA device sees it (ata.DMA): it hands
// each data phase to the DMA
// engine, staging it through the bridge's buffer when the variant copies,
// and computes the checksum in a separate pass when the variant does not
// compute it in flight.
type dmaPath struct {
	d     *drive
	eng   *dma.Engine
	sum   checksum.Checksummer
	stage []byte        // the bridge's buffer, for variants that copy
	st    staged        // stage at the offsets of the current command
	ahead *ahead        // read-ahead and write-behind, for the variant that has them
	async *asyncBackend // the NBD client keeping chunks in flight, for the variant pipelined in chunks
	last  uint16        // the checksum of the last data phase
}

// hostMem returns the first n bytes of the command's host memory, the one
// region the host driver prepared the engine with.
func (p *dmaPath) hostMem(n int64) []byte { return p.eng.Memory().Region(0)[:n] }

func (p *dmaPath) DeviceToHost(src io.ReaderAt, off, n int64) error {
	p.sum.Reset()
	if p.ahead != nil {
		buf, err := p.ahead.read(src, off, n)
		if err != nil {
			return err
		}
		p.st = staged{b: buf, base: off}
		if err := p.eng.DeviceToHost(&p.st, off, n); err != nil {
			return err
		}
		p.finish(buf)
		return nil
	}
	if p.stage == nil {
		if a := p.async; a != nil {
			a.ReaderAt, src = src, a
		}
		if err := p.eng.DeviceToHost(src, off, n); err != nil {
			return err
		}
		p.finish(p.hostMem(n))
		return nil
	}
	// The whole command from the back end into the bridge's memory, then
	// through the FIFO to the host. The fetch happens when the engine asks
	// for the first sector, on the engine's producer side: the same
	// series of steps as fetching before starting the engine, and the
	// engine tells its worker about the transfer only once that first
	// chunk is in the FIFO, so no spinning worker competes with the NBD
	// request for the processor.
	if int64(len(p.stage)) < n {
		return errStage
	}
	p.st = staged{b: p.stage[:n], base: off, src: src}
	if err := p.eng.DeviceToHost(&p.st, off, n); err != nil {
		return err
	}
	p.finish(p.stage[:n])
	return nil
}

func (p *dmaPath) HostToDevice(dst io.WriterAt, off, n int64) error {
	p.sum.Reset()
	if p.ahead != nil {
		buf, err := p.ahead.writeBuffer(n)
		if err != nil {
			return err
		}
		p.st = staged{b: buf, base: off}
		if err := p.eng.HostToDevice(&p.st, off, n); err != nil {
			return err
		}
		p.finish(buf)
		p.ahead.writeBehind(buf, off)
		return nil
	}
	if p.stage == nil {
		if a := p.async; a != nil {
			a.WriterAt, dst = dst, a
		}
		if err := p.eng.HostToDevice(dst, off, n); err != nil {
			return err
		}
		p.finish(p.hostMem(n))
		return nil
	}
	if int64(len(p.stage)) < n {
		return errStage
	}
	p.st = staged{b: p.stage[:n], base: off}
	if err := p.eng.HostToDevice(&p.st, off, n); err != nil {
		return err
	}
	p.finish(p.stage[:n])
	_, err := dst.WriteAt(p.stage[:n], off)
	return err
}

// finish records the checksum of the data phase: the tap's, or a separate
// pass over the data where it now lies.
func (p *dmaPath) finish(data []byte) {
	if p.d.v.InFlight {
		p.last = p.sum.Sum16()
		return
	}
	p.last = checksum.Checksum(data, 0)
}

var errStage = errors.New("nhd: command larger than the bridge's buffer")

// staged is the bridge's buffer seen at the device offsets of the command
// it holds. With src set, the first ReadAt fills the whole buffer from src
// (the back end) before copying out of it.
type staged struct {
	b    []byte
	base int64
	src  io.ReaderAt
}

func (s *staged) ReadAt(p []byte, off int64) (int, error) {
	if s.src != nil {
		src := s.src
		s.src = nil
		if m, err := src.ReadAt(s.b, s.base); m < len(s.b) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	return copy(p, s.b[off-s.base:]), nil
}

func (s *staged) WriteAt(p []byte, off int64) (int, error) {
	return copy(s.b[off-s.base:], p), nil
}

// asyncBackend is the drive's back end as the DMA engine sees it in the
// variant pipelined in chunks: a device that keeps requests in flight
// (dma.AsyncReaderAt, dma.AsyncWriterAt) through the NBD client's
// StartRead and StartWrite, from the drive's goroutine. ReaderAt and
// WriterAt are the device's own view of the back end, for the engine's
// plain calls.
type asyncBackend struct {
	io.ReaderAt
	io.WriterAt
	st      starter
	calls   []nbd.Call // a ring of the requests in flight, oldest at head
	head, n int
}

func newAsyncBackend(st starter, depth int) *asyncBackend {
	return &asyncBackend{st: st, calls: make([]nbd.Call, max(depth, 1))}
}

func (a *asyncBackend) push(c nbd.Call, err error) error {
	if err != nil {
		return err
	}
	if a.n == len(a.calls) {
		// The engine starts no more than its FIFO holds chunks, and the
		// ring is that long.
		panic("nhd: more NBD requests in flight than the drive's FIFO holds chunks")
	}
	a.calls[(a.head+a.n)%len(a.calls)] = c
	a.n++
	return nil
}

func (a *asyncBackend) pop() error {
	c := a.calls[a.head]
	a.calls[a.head] = nbd.Call{}
	a.head = (a.head + 1) % len(a.calls)
	a.n--
	return c.Wait(context.Background())
}

func (a *asyncBackend) StartReadAt(p []byte, off int64) error {
	return a.push(a.st.StartRead(context.Background(), p, off, 0))
}

func (a *asyncBackend) StartWriteAt(p []byte, off int64) error {
	return a.push(a.st.StartWrite(context.Background(), p, off, 0))
}

func (a *asyncBackend) WaitRead() error  { return a.pop() }
func (a *asyncBackend) WaitWrite() error { return a.pop() }
