package bridge

import (
	"errors"
	"fmt"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/zerocopy"
)

// Bridge is one emulated NHD: an ATA device whose backend is the Config's
// (behind an Ahead when pipelined across commands), a DMA engine moving
// its data phase through a sector FIFO into host memory with the checksum
// computed on the way, and the host driver that issues commands through
// its registers.
//
// A Bridge is not safe for concurrent use: one goroutine plays the host.
// Run commands in parallel with several Bridges on one backend (an
// *nbd.Client is safe for that). In steady state a command allocates
// nothing.
type Bridge struct {
	cfg    Config
	eng    *dma.Engine
	dev    *ata.Device
	host   *ata.Host
	path   path
	ahead  *Ahead // pipelined across commands
	cmd    ata.Command
	closed bool
}

// New assembles a bridge.
func New(c Config) (*Bridge, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bridge{cfg: c}
	be := c.Backend
	switch {
	case c.Pipelining == AcrossCommands:
		ac := AheadConfig{Block: c.MaxCommand, Depth: c.Depth, Context: c.Context, Copies: &b.path.copies}
		if b.ahead, err = NewAhead(be, ac); err != nil {
			return nil, err
		}
		be = b.ahead
	case !c.ZeroCopy:
		b.path.stage = make([]byte, c.MaxCommand)
	}
	ec := c.engineConfig()
	b.path.inFlight = c.ChecksumInFlight
	if c.ChecksumInFlight {
		ec.Tap = &b.path.sum
	}
	if b.eng, err = dma.New(ec); err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	b.path.eng = b.eng
	if b.dev, err = ata.NewDevice(deviceConfig(&c, be, &b.path)); err != nil {
		b.eng.Close()
		return nil, errors.Join(ErrConfig, err)
	}
	// The engine is the host driver's bus master itself
	// (dma.Engine.Prepare points it at each command's buffer).
	if b.host, _, err = ata.Attach(b.dev, b.eng); err != nil {
		b.eng.Close()
		return nil, err
	}
	return b, nil
}

// deviceConfig is the ATA device's configuration for c over backend be.
func deviceConfig(c *Config, be ata.Backend, dm ata.DMA) ata.Config {
	info := c.Info
	info.Sectors = c.Sectors
	if info.Sectors == 0 {
		if s, ok := be.(ata.Sizer); ok {
			info.Sectors = uint64(s.Size()) / 512
		}
	}
	if info.Model == "" {
		info.Model, info.Serial, info.Firmware = "nhd bridge", "NHD0001", "1.0"
	}
	if info.RotationRate == 0 {
		info.RotationRate = ata.NonRotating
	}
	// A volatile write cache, as on any disk: a write completes when the
	// backend has acknowledged it (or, pipelined across commands, once it
	// is in the bridge's memory), and FLUSH CACHE makes the backend flush.
	// Without it the device would flush after every write.
	info.WriteCache = true
	return ata.Config{Info: info, Backend: be, DMA: dm, Context: c.Context}
}

// Read runs READ DMA EXT of len(p) bytes at byte offset off into p. An
// error from the device is an *ata.Error (errors.As) with its status,
// error bits and failing LBA, wrapped with the backend's error.
func (b *Bridge) Read(p []byte, off int64) error { return b.exec(ata.CmdReadDMAExt, p, off) }

// Write runs WRITE DMA EXT of p at byte offset off; errors are Read's.
func (b *Bridge) Write(p []byte, off int64) error { return b.exec(ata.CmdWriteDMAExt, p, off) }

func (b *Bridge) exec(op ata.Opcode, p []byte, off int64) error {
	if len(p) == 0 || len(p)%512 != 0 || len(p) > b.cfg.MaxCommand || off%512 != 0 || off < 0 {
		return ErrCommandSize
	}
	if b.closed {
		return ErrClosed
	}
	b.cmd = ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: uint64(off) / 512, Count: uint32(len(p) / 512)}
	return b.check(b.host.Exec(&b.cmd, p))
}

// check adds the backend's error to a failed command's.
func (b *Bridge) check(err error) error {
	if err == nil {
		return nil
	}
	if be := b.dev.BackendErr(); be != nil {
		return fmt.Errorf("%w (backend: %w)", err, be)
	}
	return err
}

// Flush runs FLUSH CACHE EXT: the writes behind, if any, complete, and the
// backend flushes what it has acknowledged.
func (b *Bridge) Flush() error {
	if b.closed {
		return ErrClosed
	}
	b.cmd = ata.Command{Op: ata.CmdFlushCacheExt}
	return b.check(b.host.Exec(&b.cmd, nil))
}

// Sum returns the Internet checksum (package checksum) the bridge computed
// over the data of its last READ or WRITE.
func (b *Bridge) Sum() uint16 { return b.path.last }

// Copies reports, since New, the payload bytes the bridge's data phases
// carried and the bytes it copied on their way (zerocopy.CopyStats): the
// DMA engine's copies between host memory and its FIFO, the staging
// buffer's when the datapath is not zero-copy, and the Ahead's when it is
// pipelined across commands. What the backend copies (an NBD client's
// reads from its socket, a memory disk's) is the backend's, not counted.
// A zero-copy datapath makes one copy per byte; staging adds one. So does
// an Ahead on a store-and-forward datapath; on a streaming one the engine
// borrows the Ahead's buffers (dma.PeekReaderAt, dma.ReserveWriterAt) and
// copies each byte once, straight between them and host memory.
func (b *Bridge) Copies() zerocopy.CopyStats { return b.path.copies.Snapshot() }

// Host returns the host driver, for commands Read, Write and Flush do not
// cover (IDENTIFY DEVICE, DATA SET MANAGEMENT, ...). Its commands run on the
// same device: not concurrently with the Bridge's own methods.
func (b *Bridge) Host() *ata.Host { return b.host }

// Close waits for the requests in flight (pipelined across commands) and
// stops the DMA engine. It returns the error of a write behind that failed
// and was not reported yet. It does not close the backend. Read, Write and
// Flush then return ErrClosed; a second Close returns nil.
func (b *Bridge) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	var err error
	if b.ahead != nil {
		err = b.ahead.Close()
	}
	return errors.Join(err, b.eng.Close())
}
