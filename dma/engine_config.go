package dma

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nhdkit/nhd/internal/spin"
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
const DefaultSpin = spin.Engine

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
	// after a few checks. A
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
	// it there after it has parked costs a cross-core wake-up, which on a
	// machine with few cores can cost more than copying a transfer the
	// size of an ATA command: there such a transfer is faster inline (and
	// leaves the other core to the program's I/O). BenchmarkTransfer
	// (streaming against streaming-inline) and BenchmarkSpin (inline
	// against the spins) measure it on a given machine. An inline
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
	// goroutine alone (Config.InlineMax, or a backend that lends its
	// buffers: PeekReaderAt, ReserveWriterAt).
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
