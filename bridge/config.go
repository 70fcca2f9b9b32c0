package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
)

// Tuning defaults. Each is measured by examples/nhd's Table 4 (its flag
// of the same name changes it) on the rows it affects; see that example's
// README for the current figures.
const (
	// DefaultChunk is the bytes per backend request of a bridge pipelined
	// in chunks (examples/nhd -chunk). Every NBD request has a fixed cost
	// that a chunk's share of the front end cannot hide, so the fewer
	// requests per command the better: two per 64 KiB command.
	DefaultChunk = 32 << 10
	// DefaultDepth is how many requests a bridge pipelined across commands
	// keeps in flight (examples/nhd -ahead): with a few, the server works
	// on the next while the device works on this one; more only hold
	// buffers and, for reads, fetch what a random workload drops.
	DefaultDepth = 3
	// DefaultSpin is the DMA engine's spin (dma.Config.Spin,
	// examples/nhd -spin): the NBD client's request and its reply reader
	// need the processor while the engine waits on them, so on a machine
	// with few cores a short spin is best.
	DefaultSpin = dma.DefaultSpin
	// DefaultMaxCommand is the largest command when Config.MaxCommand is
	// 0: the paper's 64 KiB READ/WRITE DMA EXT.
	DefaultMaxCommand = 64 << 10
	// MaxInFlight bounds Depth, and the chunks pipelined InChunks keeps
	// in flight at once: the requests a bridge keeps in
	// flight must all be accepted by the server while their replies wait
	// to be read (nbdkit runs 16 threads, package nbd's Server serves 16
	// requests of a connection at once by default), or a request's write
	// could wait on a server waiting for its replies to be read.
	MaxInFlight = 16
)

// Pipelining is how a bridge overlaps its back end (the backend's
// requests) with its front end (the DMA to or from the host).
type Pipelining uint8

const (
	// Series moves the whole command from the backend before the DMA to
	// the host starts (or after the DMA from it ends): the paper's
	// synchronous cascade.
	Series Pipelining = iota
	// InChunks moves each command in requests of Config.Chunk bytes, each
	// overlapped with the DMA of the one before, the backend's requests
	// kept in flight through its async methods (dma.AsyncReaderAt,
	// dma.AsyncWriterAt; *nbd.Client has them).
	InChunks
	// AcrossCommands puts an Ahead in front of the backend: the back end
	// reads the next blocks while the front end moves this command, and a
	// write completes once its data is in the bridge's memory, behind the
	// device's volatile write cache (FLUSH CACHE waits for it).
	AcrossCommands
)

var pipeliningNames = [...]string{Series: "series", InChunks: "in chunks", AcrossCommands: "across commands"}

func (p Pipelining) String() string {
	if int(p) < len(pipeliningNames) {
		return pipeliningNames[p]
	}
	return "Pipelining(" + strconv.Itoa(int(p)) + ")"
}

// MarshalText names p ("series", "in chunks", "across commands").
func (p Pipelining) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (p *Pipelining) UnmarshalText(b []byte) error {
	for i, n := range pipeliningNames {
		if string(b) == n {
			*p = Pipelining(i)
			return nil
		}
	}
	return fmt.Errorf("bridge: unknown pipelining %q", b)
}

// Datapath is the choices the paper's optimisations make.
type Datapath struct {
	// Streaming moves the data phase through the FIFO with the producer
	// and the consumer overlapped (dma.Streaming); off, one sector at a
	// time with a handshake per sector (dma.StoreAndForward).
	Streaming bool `json:"streaming"`
	// ZeroCopy reads the backend's data straight into the FIFO and writes
	// it straight from it; off, the data is staged through a bridge buffer
	// the size of the command (one more copy of every byte). Pipelined
	// across commands the data is staged through the Ahead's buffers, and
	// ZeroCopy must be off (streaming, the DMA engine copies straight
	// between those buffers and host memory: one copy of every byte).
	ZeroCopy bool `json:"zero_copy"`
	// ChecksumInFlight computes the checksum by the DMA engine's tap as the
	// data moves; off, by a separate pass over the data after it has
	// moved.
	ChecksumInFlight bool `json:"checksum_in_flight"`
	// Pipelining overlaps the two ends.
	Pipelining Pipelining `json:"pipelining"`
}

// Variant is a named Datapath: a row of Table 4.
type Variant struct {
	Name string `json:"name"`
	Datapath
}

// Table4 returns the datapaths of the paper's Table 4, from "before" to
// "after", each row adding one optimisation to the row before it (the two
// pipelined rows both to the series one, the last one staging its data
// through the read-ahead's buffers instead of zero-copy).
func Table4() []Variant {
	return []Variant{
		{"store-and-forward", Datapath{}},
		{"+ DMA streaming", Datapath{Streaming: true}},
		{"+ zero-copy", Datapath{Streaming: true, ZeroCopy: true}},
		{"+ checksum in flight", Datapath{Streaming: true, ZeroCopy: true, ChecksumInFlight: true}},
		{"+ pipelined in chunks", Datapath{Streaming: true, ZeroCopy: true, ChecksumInFlight: true, Pipelining: InChunks}},
		{"+ pipelined across commands", Datapath{Streaming: true, ChecksumInFlight: true, Pipelining: AcrossCommands}},
	}
}

// Config is what New assembles a bridge from.
type Config struct {
	// Backend holds the disk: an *nbd.Client, an *nbd.MemDisk, an
	// *os.File (see ata.Backend).
	Backend ata.Backend
	// Datapath is the datapath; the zero value is store-and-forward.
	Datapath
	// MaxCommand is the largest command in bytes, a multiple of 512; 0
	// means DefaultMaxCommand. The bridge's buffers are this size.
	MaxCommand int
	// Sectors is the device's capacity in 512-byte sectors; 0 means the
	// backend's Size (ata.Sizer), which it must then have.
	Sectors uint64
	// Info describes the device; its Sectors and WriteCache are set by
	// New. A zero Model, Serial or Firmware gets a default.
	Info ata.DeviceInfo
	// Chunk is the bytes per backend request pipelined InChunks, a
	// multiple of 512; 0 means DefaultChunk.
	Chunk int
	// Depth is the requests in flight pipelined AcrossCommands; 0 means
	// DefaultDepth.
	Depth int
	// Spin is the DMA engine's spin (dma.Config.Spin); 0 means
	// DefaultSpin.
	Spin time.Duration
	// Overlap runs every streaming transfer on the DMA engine's worker
	// goroutine. Off (the default), a transfer up to MaxCommand runs on
	// the caller's goroutine (dma.Config.InlineMax): on a machine with few
	// cores waking the worker costs more than the copy it would overlap,
	// and slows the backend's request after it (examples/nhd -overlap
	// measures both).
	Overlap bool
	// Context bounds the backend's Flush and Trim and the Ahead's waits;
	// nil means context.Background().
	Context context.Context
}

// Errors of New.
var (
	// ErrConfig is returned (wrapped) by New for a Config it cannot
	// assemble, and by NewAhead for an AheadConfig.
	ErrConfig = errors.New("bridge: invalid config")
	// ErrCommandSize is returned by Bridge.Read and Write for a buffer
	// that is empty, longer than MaxCommand or not a multiple of 512, or
	// an offset that is negative or not a multiple of 512.
	ErrCommandSize = errors.New("bridge: command size not a multiple of 512 up to MaxCommand")
	// ErrClosed is returned by a Bridge's Read, Write and Flush after its
	// Close.
	ErrClosed = errors.New("bridge: closed")
)

// withDefaults fills in c's zero fields and checks it.
func (c Config) withDefaults() (Config, error) {
	c.MaxCommand = cmp(c.MaxCommand, DefaultMaxCommand)
	c.Chunk = cmp(c.Chunk, DefaultChunk)
	c.Depth = cmp(c.Depth, DefaultDepth)
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	switch {
	case c.Backend == nil:
		return c, errors.Join(ErrConfig, errors.New("bridge: no backend"))
	case c.MaxCommand%512 != 0 || c.Chunk%512 != 0 || c.MaxCommand < 0 || c.Chunk < 0:
		return c, errors.Join(ErrConfig, errors.New("bridge: MaxCommand and Chunk must be multiples of 512"))
	case c.Depth < 0 || c.Depth > MaxInFlight:
		return c, errors.Join(ErrConfig, errors.New("bridge: Depth must be 0 to MaxInFlight"))
	case c.ZeroCopy && c.Pipelining == AcrossCommands:
		return c, errors.Join(ErrConfig, errors.New("bridge: pipelined across commands stages its data: ZeroCopy must be off"))
	case c.Pipelining > AcrossCommands:
		return c, errors.Join(ErrConfig, errors.New("bridge: unknown Pipelining"))
	}
	return c, nil
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// engineConfig is the DMA engine's configuration for c's datapath.
func (c *Config) engineConfig() dma.Config {
	cmd := c.MaxCommand / dma.SectorSize
	e := dma.Config{Mode: dma.StoreAndForward}
	switch {
	case !c.Streaming:
		return e
	case c.Pipelining == AcrossCommands || (c.ZeroCopy && c.Pipelining == Series):
		// One backend call per command: into (or from) a FIFO that holds
		// it, then to the host. Pipelined across commands the engine
		// borrows the Ahead's buffers instead (dma.PeekReaderAt,
		// dma.ReserveWriterAt) and copies straight between them and the
		// host; its FIFO then serves only a backend that does not lend.
		e = dma.Config{Mode: dma.Streaming, FIFOBlocks: cmd, ChunkSectors: cmd}
	case c.ZeroCopy:
		// Requests of Chunk bytes straight into the FIFO, each overlapped
		// with the DMA of the one before: the FIFO holds the command, or
		// as many chunks as may be in flight at once.
		k := max(1, min(c.MaxCommand, c.Chunk)/dma.SectorSize)
		e = dma.Config{Mode: dma.Streaming, FIFOBlocks: min(cmd, MaxInFlight*k), ChunkSectors: k}
	default:
		// The paper's DMA streaming: the CPU feeds a small FIFO from the
		// bridge's buffer while the FIFO drains to the host.
		e.Mode = dma.Streaming
	}
	e.Spin = c.Spin
	if !c.Overlap {
		e.InlineMax = int64(c.MaxCommand)
	}
	return e
}
