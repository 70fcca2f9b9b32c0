package dma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/fifo"
)

// Mode is how the engine moves a transfer through its FIFO.
type Mode uint8

const (
	// Streaming overlaps the producer and the consumer through the FIFO,
	// chunks of several sectors at a time, with one interrupt to start the
	// transfer and one when it is done: the paper's "after".
	Streaming Mode = iota
	// StoreAndForward moves one sector at a time through a one-sector
	// FIFO, with a handshake (an interrupt to the CPU) per sector and no
	// overlap: the paper's "before".
	StoreAndForward
)

// String returns "streaming" or "store-and-forward".
func (m Mode) String() string {
	switch m {
	case Streaming:
		return "streaming"
	case StoreAndForward:
		return "store-and-forward"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Direction is the direction of a transfer's data phase.
type Direction uint8

const (
	ToHost   Direction = iota + 1 // device to host memory: an ATA read
	ToDevice                      // host memory to device: an ATA write
)

// String returns "to-host" or "to-device".
func (d Direction) String() string {
	switch d {
	case ToHost:
		return "to-host"
	case ToDevice:
		return "to-device"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Errors from the engine. Errors of the device backend and of the tap are
// returned wrapped, so errors.Is finds them.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("dma: invalid configuration")
	// ErrLength reports a transfer length that is not a positive multiple
	// of SectorSize, or a negative offset.
	ErrLength = errors.New("dma: transfer length is not a positive number of sectors")
	// ErrNoMemory reports a transfer before any host memory was
	// programmed (SetRegions or LoadPRD).
	ErrNoMemory = errors.New("dma: no host memory programmed")
	// ErrShortMemory reports host memory shorter than the transfer.
	ErrShortMemory = errors.New("dma: host memory shorter than the transfer")
	// ErrTablePointer reports a PRD table pointer that is not dword aligned.
	ErrTablePointer = errors.New("dma: PRD table pointer not dword aligned")
	// ErrBusy reports a transfer started while another is running.
	ErrBusy = errors.New("dma: transfer already in progress")
	// ErrClosed reports use of a closed engine.
	ErrClosed = errors.New("dma: engine closed")
)

// CopyTap is a tap that can also move the bytes it observes, in one pass
// over them (integrated layer processing): CopyAndWrite copies src into dst,
// which is at least as long, and observes src as Write would. Package
// checksum's Checksummer is one. When Config.Tap is a CopyTap the engine
// routes its own copy through it (FIFO to host memory on a read, host
// memory to FIFO on a write) instead of calling Write and then copy, so the
// data is read once.
type CopyTap interface {
	io.Writer
	CopyAndWrite(dst, src []byte) int
}

// TapFunc adapts a function to a Config.Tap.
type TapFunc func(p []byte)

// Write calls f(p) and reports success.
func (f TapFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

// Defaults for Config: a FIFO that holds a whole 64 KiB request (the
// paper's typical transfer), so the producer never waits for the consumer
// within one, and 16 KiB steps, four per request. Measured best among
// 64/16, 128/32 and 256/128 (see BenchmarkTransfer).
const (
	DefaultFIFOBlocks   = 128
	DefaultChunkSectors = 32
)

// DefaultSpin is how long a side of a streaming transfer spins for the
// other before it parks when Config.Spin is 0. A couple of microseconds
// cover the hand-offs inside back-to-back in-memory transfers, yet are short
// enough that a spinning side does not hold a core for long while a
// goroutine elsewhere in the program (an NBD request, its reply reader)
// needs it. Measured in BenchmarkTransfer and BenchmarkSpin (README).
const DefaultSpin = 2 * time.Microsecond

// Config sets up an Engine.
type Config struct {
	// Mode is Streaming (the zero value) or StoreAndForward.
	Mode Mode
	// FIFOBlocks is the FIFO's capacity in sectors for Streaming; 0 means
	// DefaultFIFOBlocks. StoreAndForward always uses a one-sector FIFO.
	FIFOBlocks int
	// ChunkSectors is how many sectors the producer moves per step in
	// Streaming (one backend ReadAt, or one copy from host memory); 0 means
	// DefaultChunkSectors. It is capped at FIFOBlocks; a divisor of
	// FIFOBlocks keeps every step whole.
	ChunkSectors int
	// Tap, if not nil, sees the transfer's data as it moves: the engine
	// writes each byte to it exactly once, in order, in chunks straight
	// from the FIFO, without copying. A hash.Hash plugs in directly;
	// TapFunc adapts a function. Tap must not retain or modify the slice.
	// An error from Tap aborts the transfer. On a transfer that fails, the
	// tap may have seen a chunk the destination then refused. In Streaming
	// mode Tap runs on the engine's worker goroutine, except that a CopyTap
	// on a write, and any tap of an inline transfer (InlineMax), runs on
	// the calling goroutine; it is never called concurrently.
	Tap io.Writer
	// Clock is the engine's time source; nil means a new WallClock.
	Clock Clock
	// Timing, if not nil, makes the engine model the duration of each
	// transfer from the steps it performs (see Timing), and advance Clock
	// to the modelled end. With a VirtualClock the engine then reproduces
	// the paper's front-end figures; with nil the engine runs at full
	// memory speed and reports real time.
	Timing *Timing
	// Spin is how long a side of a streaming transfer spins (yielding the
	// processor now and then) waiting for the other before it parks on a
	// channel: the worker between transfers, the caller for the end of a
	// transfer, and either side waiting on the FIFO within one (it is the
	// FIFO's fifo.Config.Spin). 0 means DefaultSpin; a negative Spin parks
	// at once (the FIFO after a few checks). A
	// longer spin saves goroutine wake-ups between back-to-back transfers;
	// a shorter one leaves the processor to other goroutines sooner, which
	// matters when the backend's I/O needs it (an NBD client on a machine
	// with few cores). StoreAndForward does not use it.
	Spin time.Duration
	// InlineMax is the largest Streaming transfer, in bytes, that runs on
	// the calling goroutine alone: the producer and the consumer take
	// turns, a chunk at a time, through the FIFO. The data still cuts
	// through it (the host side has each chunk before the device side
	// moves the next), the transfer still costs two interrupts and the tap
	// sees the same chunks, but nothing overlaps and the worker is not
	// woken. Overlap needs the worker running on another core, and waking
	// it there after it has parked costs a cross-core wake-up: about 10 us
	// on a 2-vCPU virtual machine, where a 64 KiB copy takes about 2 us, so
	// on such a machine a transfer the size of an ATA command is faster
	// inline (and leaves the other core to the program's I/O). An inline
	// transfer from an AsyncReaderAt or to an AsyncWriterAt still overlaps
	// the two sides: the device's requests stay in flight while the host
	// side moves the chunks before them. 0 means every Streaming transfer
	// overlaps on the worker. With Timing, the modelled time is the same
	// either way: it models the hardware.
	InlineMax int64
}

// Transfer describes one completed (or failed) transfer.
type Transfer struct {
	Direction   Direction
	Mode        Mode
	Offset      int64 // device offset in bytes
	Bytes       int64 // bytes moved (those of a failed transfer included)
	Sectors     int64
	Interrupts  int // interrupts to the CPU (handshakes)
	Completions int // completion interrupts to the host
	Chunks      int // producer steps
	// Inline reports a Streaming transfer that ran on the calling
	// goroutine alone (Config.InlineMax).
	Inline bool
	Copies int // copy calls the engine made on payload
	// CopiedBytes counts the payload bytes the engine copied; a failed
	// write can count sectors copied into the FIFO that never reached the
	// device.
	CopiedBytes int64
	// Start and End are on the engine's clock. With Config.Timing, End is
	// the modelled end of the transfer.
	Start, End time.Duration
	Err        error
}

// Elapsed returns End - Start.
func (t Transfer) Elapsed() time.Duration { return t.End - t.Start }

// CopiesPerByte returns CopiedBytes / Bytes, the number of times the
// engine copied each payload byte.
func (t Transfer) CopiesPerByte() float64 {
	if t.Bytes == 0 {
		return 0
	}
	return float64(t.CopiedBytes) / float64(t.Bytes)
}

// Stats are an engine's counters since New.
type Stats struct {
	Transfers   uint64 // transfers completed without error
	Failed      uint64 // transfers that returned an error
	Interrupts  uint64
	Completions uint64
	Sectors     uint64
	Bytes       uint64
	Copies      uint64
	CopiedBytes uint64
}

// Engine is a bus master: it moves the data phase of a DMA command between
// a device backend (an io.ReaderAt or io.WriterAt) and host memory (a
// scatter-gather list the host programs before the command) through a
// sector FIFO. It implements the DMA interface of package ata:
//
//	DeviceToHost(src io.ReaderAt, off, n int64) error
//	HostToDevice(dst io.WriterAt, off, n int64) error
//
// In Streaming mode the calling goroutine is the producer and a long-lived
// worker goroutine, started by the first streaming transfer and stopped by
// Close, is the consumer (a transfer no longer than Config.InlineMax runs
// both sides on the calling goroutine instead); no transfer spawns a
// goroutine or allocates. After
// a transfer the worker spins for up to Config.Spin waiting for the next one
// (so back-to-back transfers do not pay a goroutine wake-up), then parks;
// the caller likewise spins up to Config.Spin for the end of a transfer. An
// engine that is never closed keeps its parked worker.
//
// Concurrency: one transfer at a time (a second concurrent one gets
// ErrBusy); SetRegions and LoadPRD must not run during a transfer; Stats,
// Last and Close are safe from any goroutine. The backend's ReadAt and
// WriteAt are called from the calling goroutine (producer side) or the
// worker (consumer side), never concurrently with themselves.
type Engine struct {
	mode    Mode
	chunk   int
	tap     io.Writer
	ctap    CopyTap // tap, when it can copy
	clock   Clock
	timing  *Timing
	spin    time.Duration // < 0: park at once
	inline  int64         // Config.InlineMax
	pending []int         // sectors of each of writeBehind's writes in flight
	handles []Handle      // the async requests in flight, in the order started
	f       *fifo.FIFO
	ctx     context.Context
	sg      SGList
	prd     []PRD

	mu     sync.Mutex // held for a transfer
	closed atomic.Bool

	// The job the worker consumes, set before start is posted.
	dir       Direction
	src       io.ReaderAt
	dst       io.WriterAt
	off, n    int64
	prodErr   error // the producer's own error (the backend's read)
	start     event
	done      event
	startSeen uint64
	doneSeen  uint64
	workerOn  bool
	quit      atomic.Bool
	exited    chan struct{}

	// The consumer's results, read after done.
	cons side

	// Modelled time: when each FIFO slot's block is ready for the
	// consumer, and when the consumer freed it.
	ready, free []time.Duration

	statMu sync.Mutex
	last   Transfer
	stats  Stats
}

// side is one side's state for a transfer.
type side struct {
	pos    int64         // bytes moved
	block  int64         // blocks moved
	cur    cursor        // position in host memory
	copied int64         // payload bytes copied
	t      time.Duration // modelled time
	steps  int
	err    error
}

// New returns an engine configured by c.
func New(c Config) (*Engine, error) {
	if c.Mode != Streaming && c.Mode != StoreAndForward {
		return nil, fmt.Errorf("%w: mode %v", ErrConfig, c.Mode)
	}
	if c.FIFOBlocks == 0 {
		c.FIFOBlocks = DefaultFIFOBlocks
	}
	if c.ChunkSectors == 0 {
		c.ChunkSectors = DefaultChunkSectors
	}
	if c.FIFOBlocks < 0 || c.ChunkSectors < 0 {
		return nil, fmt.Errorf("%w: FIFOBlocks %d, ChunkSectors %d", ErrConfig, c.FIFOBlocks, c.ChunkSectors)
	}
	if c.InlineMax < 0 {
		return nil, fmt.Errorf("%w: InlineMax %d", ErrConfig, c.InlineMax)
	}
	if c.Mode == StoreAndForward {
		c.FIFOBlocks, c.ChunkSectors = 1, 1
	}
	c.ChunkSectors = min(c.ChunkSectors, c.FIFOBlocks)
	if t := c.Timing; t != nil {
		if t.HostBusWidth <= 0 || SectorSize%t.HostBusWidth != 0 || t.CPUBusWidth <= 0 || SectorSize%t.CPUBusWidth != 0 {
			return nil, fmt.Errorf("%w: bus widths %d and %d must divide %d", ErrConfig, t.HostBusWidth, t.CPUBusWidth, SectorSize)
		}
		tc := *t
		c.Timing = &tc
	}
	if c.Clock == nil {
		c.Clock = NewWallClock()
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	f, err := fifo.New(fifo.Config{Blocks: c.FIFOBlocks, BlockSize: SectorSize, Spin: c.Spin})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	e := &Engine{
		mode:    c.Mode,
		chunk:   c.ChunkSectors,
		tap:     c.Tap,
		clock:   c.Clock,
		timing:  c.Timing,
		spin:    c.Spin,
		inline:  c.InlineMax,
		pending: make([]int, 0, c.FIFOBlocks/c.ChunkSectors+1),
		handles: make([]Handle, 0, c.FIFOBlocks/c.ChunkSectors+1),
		f:       f,
		ctx:     context.Background(),
		start:   newEvent(),
		done:    newEvent(),
	}
	if ct, ok := c.Tap.(CopyTap); ok {
		e.ctap = ct
	}
	if e.timing != nil {
		e.ready = make([]time.Duration, c.FIFOBlocks)
		e.free = make([]time.Duration, c.FIFOBlocks)
	}
	return e, nil
}

// Mode returns the engine's mode.
func (e *Engine) Mode() Mode { return e.mode }

// SetRegions programs host memory for the next transfers as a
// scatter-gather list over regions, which the engine reads or writes in
// place (it keeps them until the next SetRegions or LoadPRD).
func (e *Engine) SetRegions(regions ...[]byte) {
	e.prd = e.prd[:0]
	e.sg.Reset(regions...)
}

// Prepare programs host memory for the next transfers as the single region
// buf; it is SetRegions(buf), and makes the engine a bus master in the
// shape package ata's host driver expects (ata.BusMaster). It never fails.
func (e *Engine) Prepare(buf []byte) error {
	e.SetRegions(buf)
	return nil
}

// LoadPRD programs host memory for the next transfers from the PRD table
// at physical address ptr of mem, as a bus master does when the host
// writes its PRD Table Pointer register: it reads at most MaxTableBytes,
// decodes the entries strictly (DecodePRD) up to the end-of-table entry and
// maps each region into mem. Check the table's length against the command
// with ValidateTable(e.Table(), n) where the command is known.
func (e *Engine) LoadPRD(mem Memory, ptr uint32) error {
	e.sg.Reset()
	e.prd = e.prd[:0]
	if ptr&3 != 0 {
		return fmt.Errorf("%w: %#x", ErrTablePointer, ptr)
	}
	lo := int64(ptr) - int64(mem.Base)
	if lo < 0 || lo >= int64(len(mem.Bytes)) {
		return fmt.Errorf("%w: table pointer %#x", ErrAddress, ptr)
	}
	b := mem.Bytes[lo:]
	if len(b) > MaxTableBytes {
		b = b[:MaxTableBytes]
	}
	var err error
	if e.prd, err = ParseTable(e.prd, b); err != nil {
		e.prd = e.prd[:0]
		return err
	}
	return e.sg.resetPRD(mem, e.prd)
}

// Table returns the PRD table the last LoadPRD decoded (empty after
// SetRegions or a failed LoadPRD). The slice is the engine's, valid until the next LoadPRD.
func (e *Engine) Table() []PRD { return e.prd }

// Memory returns the host memory programmed for the next transfer. The
// list is the engine's; do not change it during a transfer.
func (e *Engine) Memory() *SGList { return &e.sg }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	e.statMu.Lock()
	defer e.statMu.Unlock()
	return e.stats
}

// Last returns the record of the last transfer.
func (e *Engine) Last() Transfer {
	e.statMu.Lock()
	defer e.statMu.Unlock()
	return e.last
}

// Close stops the engine's worker and fails later transfers with
// ErrClosed. A transfer in progress is aborted (its FIFO is closed) and
// Close waits for it to return, which includes waiting for a backend call
// in progress.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.f.CloseWithError(ErrClosed)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.workerOn {
		e.quit.Store(true)
		e.start.post()
		<-e.exited
		e.workerOn = false
	}
	return nil
}

// DeviceToHost moves n bytes, read from src starting at offset off, into
// host memory: the data phase of an ATA read command. n must be a positive
// multiple of SectorSize and no more than the host memory programmed.
// src.ReadAt may be called with any chunk size; an error from it is
// returned wrapped, after the bytes read before it reached host memory.
func (e *Engine) DeviceToHost(src io.ReaderAt, off, n int64) error {
	return e.transfer(ToHost, src, nil, off, n)
}

// HostToDevice moves n bytes from host memory into dst starting at offset
// off: the data phase of an ATA write command. n must be a positive
// multiple of SectorSize and no more than the host memory programmed. An
// error from dst.WriteAt is returned wrapped.
func (e *Engine) HostToDevice(dst io.WriterAt, off, n int64) error {
	return e.transfer(ToDevice, nil, dst, off, n)
}

func (e *Engine) transfer(dir Direction, src io.ReaderAt, dst io.WriterAt, off, n int64) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if !e.mu.TryLock() {
		return ErrBusy
	}
	defer e.mu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	if n <= 0 || n%SectorSize != 0 || off < 0 {
		return fmt.Errorf("%w: %d bytes at offset %d", ErrLength, n, off)
	}
	if e.sg.NumRegions() == 0 {
		return ErrNoMemory
	}
	if e.sg.Len() < n {
		return fmt.Errorf("%w: %d bytes of memory, transfer %d", ErrShortMemory, e.sg.Len(), n)
	}
	e.dir, e.src, e.dst, e.off, e.n = dir, src, dst, off, n
	e.prodErr = nil
	t0 := e.clock.Now()
	rec := Transfer{Direction: dir, Mode: e.mode, Offset: off, Sectors: n / SectorSize, Start: t0}

	prod := side{t: t0}
	e.cons = side{t: t0}
	prod.cur.seek(&e.sg, 0)
	e.cons.cur.seek(&e.sg, 0)
	for i := range e.ready {
		e.ready[i], e.free[i] = t0, t0
	}

	var err error
	switch {
	case e.mode == StoreAndForward:
		err = e.storeAndForward(&prod, &rec)
	case n <= e.inline:
		rec.Inline = true
		err = e.streamInline(&prod)
	default:
		err = e.stream(&prod, &rec)
	}

	cons := &e.cons
	rec.Bytes = cons.pos
	rec.Chunks = prod.steps
	rec.Copies = prod.cur.copies + cons.cur.copies
	rec.CopiedBytes = prod.copied + cons.copied
	if e.timing != nil {
		end := max(prod.t, cons.t)
		if e.mode == Streaming {
			end += e.timing.Interrupt // the DMA-done interrupt
		}
		rec.End = end + e.timing.HostCompletion
		e.clock.AdvanceTo(rec.End)
	} else {
		rec.End = e.clock.Now()
	}
	if e.mode == Streaming {
		rec.Interrupts = 2
	}
	rec.Completions = 1
	rec.Err = err
	e.src, e.dst = nil, nil
	e.f.Reset()

	e.statMu.Lock()
	e.last = rec
	s := &e.stats
	if err == nil {
		s.Transfers++
	} else {
		s.Failed++
	}
	s.Interrupts += uint64(rec.Interrupts)
	s.Completions += uint64(rec.Completions)
	s.Sectors += uint64(rec.Bytes / SectorSize)
	s.Bytes += uint64(rec.Bytes)
	s.Copies += uint64(rec.Copies)
	s.CopiedBytes += uint64(rec.CopiedBytes)
	e.statMu.Unlock()
	return err
}

// storeAndForward moves the transfer one sector at a time: the producer
// fills the one-sector FIFO, the consumer empties it, and only then does
// the next sector start (the handshake the CPU's interrupt stands for).
func (e *Engine) storeAndForward(prod *side, rec *Transfer) error {
	for prod.pos < e.n {
		rec.Interrupts++
		if err := e.produce(prod, 1); err != nil {
			return err
		}
		if err := e.consume(&e.cons, 1); err != nil {
			return err
		}
	}
	return nil
}

// streamInline runs both sides here, in turns: the producer moves a chunk
// into the FIFO, the consumer moves every sector committed to it out. The
// FIFO is empty at the start of each turn, so neither side ever waits.
func (e *Engine) streamInline(prod *side) error {
	if e.timing != nil {
		prod.t += e.timing.Interrupt + e.timing.Software
		e.cons.t = prod.t
	}
	if ar, ok := e.src.(AsyncReaderAt); ok && e.dir == ToHost {
		return e.readAhead(prod, ar)
	}
	if aw, ok := e.dst.(AsyncWriterAt); ok && e.dir == ToDevice {
		return e.writeBehind(prod, aw)
	}
	cons := &e.cons
	for cons.pos < e.n {
		if prod.pos < e.n {
			k := int(min(int64(e.chunk), (e.n-prod.pos)/SectorSize))
			if err := e.produce(prod, k); err != nil && e.prodErr == nil {
				return err
			}
		}
		// The sectors the producer committed, a failed step's included;
		// the FIFO may hand them out in two pieces where it wraps.
		for cons.pos < prod.pos {
			k := int((prod.pos - cons.pos) / SectorSize)
			if err := e.consume(cons, k); err != nil {
				return err
			}
		}
		if e.prodErr != nil {
			return e.prodErr
		}
	}
	return nil
}

// readAhead is streamInline from a device that keeps reads in flight. In
// rounds of as many sectors as the FIFO has room for in one piece, it
// starts the read of every chunk of the round into the FIFO, then waits for
// each by its handle, in order, commits it and moves it to the host while
// the later ones are still on their way. Every read started is waited for,
// a failed round's included.
func (e *Engine) readAhead(prod *side, ar AsyncReaderAt) error {
	chunk := e.chunk * SectorSize
	for prod.pos < e.n {
		room, err := e.f.ReserveN(e.ctx, int((e.n-prod.pos)/SectorSize))
		if err != nil {
			return err
		}
		started := e.handles[:0]
		var startErr error
		for p := 0; p < len(room); p += chunk {
			q := min(p+chunk, len(room))
			h, err := ar.StartReadAt(e.ctx, room[p:q], e.off+prod.pos+int64(p))
			if err != nil {
				startErr = err
				break
			}
			started = append(started, h)
		}
		e.handles = started[:0]
		first := e.waitReads(prod, ar, started, len(room))
		if e.prodErr != nil {
			return e.prodErr
		}
		if first != nil {
			return first
		}
		if startErr != nil {
			e.prodErr = fmt.Errorf("dma: device read at %d: %w", e.off+prod.pos, startErr)
			return e.prodErr
		}
	}
	return nil
}

// waitReads waits for the reads of one round of readAhead, the chunks of
// room bytes, in order, and moves each to the host; after a failure it
// waits for the rest and drops them. It returns the first error.
func (e *Engine) waitReads(prod *side, ar AsyncReaderAt, started []Handle, room int) error {
	chunk := e.chunk * SectorSize
	var first error
	for i, h := range started {
		p := i * chunk
		q := min(p+chunk, room)
		err := ar.Wait(e.ctx, h)
		if first != nil {
			continue // drain the reads after a failed one
		}
		if err != nil {
			e.prodErr = fmt.Errorf("dma: device read of %d bytes at %d: %w", q-p, e.off+prod.pos, err)
			first = e.prodErr
			continue
		}
		if err := e.produced(prod, (q-p)/SectorSize); err != nil {
			first = err
			continue
		}
		if err := e.consume(&e.cons, (q-p)/SectorSize); err != nil {
			first = err
		}
	}
	return first
}

// writeBehind is streamInline to a device that keeps writes in flight. In
// rounds of as many sectors as the FIFO has room for in one piece, it moves
// each chunk from the host into the FIFO and starts its write, the next
// chunk's copy overlapping it; at the end of the round it waits for the
// writes in order and frees their sectors.
func (e *Engine) writeBehind(prod *side, aw AsyncWriterAt) error {
	cons := &e.cons
	for prod.pos < e.n {
		room, err := e.f.ReserveN(e.ctx, int((e.n-prod.pos)/SectorSize))
		if err != nil {
			return err
		}
		roomSectors := len(room) / SectorSize
		started := e.pending[:0] // sectors of each write started, in order
		handles := e.handles[:0] // and its handle
		var first error
		for done := 0; done < roomSectors; {
			k := min(e.chunk, roomSectors-done)
			if err := e.produce(prod, k); err != nil {
				first = err
				break
			}
			// The round's sectors are contiguous in the ring: peek them
			// all and start the write of the ones just committed.
			buf, err := e.f.PeekN(e.ctx, done+k)
			if err != nil {
				first = err
				break
			}
			part := buf[done*SectorSize:]
			if e.tap != nil && e.ctap == nil {
				if m, err := e.tap.Write(part); err != nil || m != len(part) {
					if err == nil {
						err = io.ErrShortWrite
					}
					cons.err = fmt.Errorf("dma: tap: %w", err)
					first = cons.err
					break
				}
			}
			h, err := aw.StartWriteAt(e.ctx, part, e.off+prod.pos-int64(len(part)))
			if err != nil {
				cons.err = fmt.Errorf("dma: device write of %d bytes at %d: %w", len(part), e.off+prod.pos-int64(len(part)), err)
				first = cons.err
				break
			}
			started = append(started, k)
			handles = append(handles, h)
			done += k
		}
		// The writes started are waited for in order; the first that
		// failed is the transfer's error (it comes before whatever stopped
		// the round from starting more), the ones before it are moved.
		var werr error
		for i, k := range started {
			err := aw.Wait(e.ctx, handles[i])
			switch {
			case werr != nil:
			case err != nil:
				cons.err = fmt.Errorf("dma: device write of %d bytes at %d: %w", k*SectorSize, e.off+cons.pos, err)
				werr = cons.err
			default:
				werr = e.consumed(cons, k)
			}
		}
		e.pending, e.handles = started[:0], handles[:0]
		if werr != nil {
			return werr
		}
		if first != nil {
			return first
		}
	}
	return nil
}

// stream runs the producer here and the consumer on the worker,
// overlapping through the FIFO.
func (e *Engine) stream(prod *side, rec *Transfer) error {
	if e.timing != nil {
		// The command interrupt and the software that programs the DMA.
		prod.t += e.timing.Interrupt + e.timing.Software
		e.cons.t = prod.t
	}
	if !e.workerOn {
		e.exited = make(chan struct{})
		e.workerOn = true
		go e.worker()
	}
	// The worker is told to start once the first chunk is in the FIFO
	// (or the producer failed): until then it would only wait, and a
	// worker woken early spins or parks again while the producer's
	// backend read (a network round trip) needs the processor. The first
	// chunk always fits, as the FIFO is empty.
	var err error
	for posted := false; prod.pos < e.n; {
		k := int(min(int64(e.chunk), (e.n-prod.pos)/SectorSize))
		err = e.produce(prod, k)
		if !posted {
			e.start.post()
			posted = true
		}
		if err != nil {
			break
		}
	}
	e.doneSeen = e.done.await(e.doneSeen, e.spin)
	if e.prodErr != nil {
		return e.prodErr
	}
	if e.cons.err != nil {
		return e.cons.err
	}
	return err
}

func (e *Engine) worker() {
	defer close(e.exited)
	for {
		e.startSeen = e.start.await(e.startSeen, e.spin)
		if e.quit.Load() {
			return
		}
		cons := &e.cons
		for cons.pos < e.n {
			k := int(min(int64(e.chunk), (e.n-cons.pos)/SectorSize))
			if err := e.consume(cons, k); err != nil {
				if !errors.Is(err, errProducer) {
					// Stop the producer; it reads the reason from cons.err.
					e.f.CloseWithError(err)
				}
				break
			}
		}
		e.done.post()
	}
}

// errProducer closes the FIFO when the producer failed: the consumer
// drains the sectors committed before the failure, then stops quietly, and
// the transfer returns the producer's error.
var errProducer = errors.New("dma: producer failed")

// produce moves up to k sectors into the FIFO: from the backend for a read,
// from host memory for a write.
func (e *Engine) produce(s *side, k int) error {
	buf, err := e.f.ReserveN(e.ctx, k)
	if err != nil {
		return err // the consumer closed the FIFO; its error is the cause
	}
	nb := len(buf) / SectorSize
	if e.dir == ToHost {
		m, err := e.src.ReadAt(buf, e.off+s.pos)
		if m < len(buf) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			e.prodErr = fmt.Errorf("dma: device read of %d bytes at %d: %w", len(buf), e.off+s.pos, err)
			// The sectors read in full still go to the host.
			nb = m / SectorSize
			e.f.Commit(nb)
			s.pos += int64(nb) * SectorSize
			e.f.CloseWithError(errProducer)
			return e.prodErr
		}
	} else {
		s.cur.copyOut(&e.sg, buf, e.ctap)
		s.copied += int64(len(buf))
	}
	return e.produced(s, nb)
}

// produced accounts for nb sectors the producer has filled at the front of
// its reservation and commits them.
func (e *Engine) produced(s *side, nb int) error {
	e.advance(s, nb, e.dir == ToHost, e.free, e.ready)
	s.steps++
	return e.f.Commit(nb)
}

// advance moves side s on by nb sectors. In modelled time each sector's
// slot waits for its turn (after[slot]: freed by the consumer, or filled by
// the producer), takes the side's cost per sector, and marks when it is
// done (mark[slot]) for the other side.
func (e *Engine) advance(s *side, nb int, cpuSide bool, after, mark []time.Duration) {
	if t := e.timing; t != nil {
		per := e.sectorCost(t, cpuSide)
		c := int64(e.f.Cap())
		for j := range int64(nb) {
			slot := (s.block + j) % c
			s.t = max(s.t, after[slot]) + per
			mark[slot] = s.t
		}
	}
	s.pos += int64(nb) * SectorSize
	s.block += int64(nb)
}

// sectorCost is the modelled time of one sector on one side of the FIFO:
// the CPU's side (backend to FIFO on a read, FIFO to backend on a write),
// with an interrupt and the software per sector in store-and-forward, or the
// host's IDE side.
func (e *Engine) sectorCost(t *Timing, cpuSide bool) time.Duration {
	if !cpuSide {
		return t.hostSector()
	}
	per := t.cpuSector(e.mode)
	if e.mode == StoreAndForward {
		per += t.Interrupt + t.Software
	}
	return per
}

// consume moves up to k sectors out of the FIFO: into host memory for a
// read, to the backend for a write. The tap sees them first.
func (e *Engine) consume(s *side, k int) error {
	buf, err := e.f.PeekN(e.ctx, k)
	if err != nil {
		if errors.Is(err, errProducer) {
			return errProducer
		}
		s.err = err
		return err
	}
	nb := len(buf) / SectorSize
	if e.tap != nil && e.ctap == nil {
		if m, err := e.tap.Write(buf); err != nil || m != len(buf) {
			if err == nil {
				err = io.ErrShortWrite
			}
			s.err = fmt.Errorf("dma: tap: %w", err)
			return s.err
		}
	}
	if e.dir == ToHost {
		s.cur.copyIn(&e.sg, buf, e.ctap)
		s.copied += int64(len(buf))
	} else {
		m, err := e.dst.WriteAt(buf, e.off+s.pos)
		if err == nil && m < len(buf) {
			err = io.ErrShortWrite
		}
		if err != nil {
			s.err = fmt.Errorf("dma: device write of %d bytes at %d: %w", len(buf), e.off+s.pos, err)
			s.pos += int64(m / SectorSize * SectorSize)
			return s.err
		}
	}
	return e.consumed(s, nb)
}

// consumed accounts for the first nb sectors of the consumer's peek, moved
// out, and releases them.
func (e *Engine) consumed(s *side, nb int) error {
	e.advance(s, nb, e.dir == ToDevice, e.ready, e.free)
	return e.f.Release(nb)
}
