package dma

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/fifo"
)

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
	spin    time.Duration // < 0: park after a few checks
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
// buf; it is SetRegions(buf), so the engine keeps buf until the next
// Prepare, SetRegions or LoadPRD, and makes the engine a bus master in the
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
