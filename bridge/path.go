package bridge

import (
	"errors"
	"io"

	"github.com/nhdkit/nhd/checksum"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/zerocopy"
)

// path is the bridge's DMA as its ATA device sees it (ata.DMA): it hands
// each data phase to the DMA engine, staging it through the bridge's
// buffer when the datapath is not zero-copy, and computes the checksum in
// a separate pass when the datapath does not compute it in flight (the
// engine's tap).
type path struct {
	eng      *dma.Engine
	sum      checksum.Checksummer // the engine's tap, with the checksum in flight
	inFlight bool
	stage    []byte // the bridge's buffer, when not zero-copy
	st       staged
	last     uint16 // the checksum of the last data phase
	// copies counts every data phase's payload and the bytes the bridge
	// copies on its way: the engine's (host memory and the FIFO), the
	// staging buffer's, and the Ahead's.
	copies zerocopy.Accounting
}

var errStage = errors.New("bridge: command larger than the bridge's buffer")

// hostMem returns the first n bytes of the command's host memory, the one
// region the host driver prepared the engine with.
func (p *path) hostMem(n int64) []byte { return p.eng.Memory().Region(0)[:n] }

func (p *path) DeviceToHost(src io.ReaderAt, off, n int64) error {
	p.sum.Reset()
	p.copies.AddPayload(n)
	if p.stage == nil {
		err := p.eng.DeviceToHost(src, off, n)
		p.counted()
		if err != nil {
			return err
		}
		p.finish(p.hostMem(n))
		return nil
	}
	// The whole command from the backend into the bridge's buffer, then
	// through the FIFO to the host. The fetch happens when the engine asks
	// for the first sector, on the engine's producer side: the same series
	// of steps as fetching before starting the engine, and the engine tells
	// its worker about the transfer only once that first chunk is in the
	// FIFO, so no spinning worker competes with the request.
	if int64(len(p.stage)) < n {
		return errStage
	}
	p.st = staged{b: p.stage[:n], base: off, src: src, copies: &p.copies}
	err := p.eng.DeviceToHost(&p.st, off, n)
	p.counted()
	if err != nil {
		return err
	}
	p.finish(p.stage[:n])
	return nil
}

func (p *path) HostToDevice(dst io.WriterAt, off, n int64) error {
	p.sum.Reset()
	p.copies.AddPayload(n)
	if p.stage == nil {
		err := p.eng.HostToDevice(dst, off, n)
		p.counted()
		if err != nil {
			return err
		}
		p.finish(p.hostMem(n))
		return nil
	}
	if int64(len(p.stage)) < n {
		return errStage
	}
	p.st = staged{b: p.stage[:n], base: off, copies: &p.copies}
	err := p.eng.HostToDevice(&p.st, off, n)
	p.counted()
	if err != nil {
		return err
	}
	p.finish(p.stage[:n])
	_, err = dst.WriteAt(p.stage[:n], off)
	return err
}

// counted adds the bytes the engine copied in the transfer just done.
func (p *path) counted() { p.copies.AddCopy(p.eng.Last().CopiedBytes) }

// finish records the checksum of the data phase: the tap's, or a separate
// pass over the data where it now lies.
func (p *path) finish(data []byte) {
	if p.inFlight {
		p.last = p.sum.Sum16()
		return
	}
	p.last = checksum.Checksum(data, 0)
}

// staged is the bridge's buffer seen at the device offsets of the command
// it holds. With src set, the first ReadAt fills the whole buffer from src
// (the backend) before copying out of it.
type staged struct {
	b      []byte
	base   int64
	src    io.ReaderAt
	copies *zerocopy.Accounting
}

func (s *staged) ReadAt(p []byte, off int64) (int, error) {
	if s.src != nil {
		src := s.src
		s.src = nil
		if _, err := readFull(src, s.b, s.base); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.b[off-s.base:])
	s.copies.AddCopy(int64(n))
	return n, nil
}

func (s *staged) WriteAt(p []byte, off int64) (int, error) {
	n := copy(s.b[off-s.base:], p)
	s.copies.AddCopy(int64(n))
	return n, nil
}
