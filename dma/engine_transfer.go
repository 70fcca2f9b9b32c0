package dma

import (
	"errors"
	"fmt"
	"io"
)

// DeviceToHost moves n bytes, read from src starting at offset off, into
// host memory: the data phase of an ATA read command. n must be a positive
// multiple of SectorSize and no more than the host memory programmed.
// src.ReadAt may be called with any chunk size; an error from it is
// returned wrapped, after the bytes read before it reached host memory.
// In Streaming mode a src that lends its buffers (PeekReaderAt) is read
// through them instead, straight into host memory.
func (e *Engine) DeviceToHost(src io.ReaderAt, off, n int64) error {
	return e.transfer(ToHost, src, nil, off, n)
}

// HostToDevice moves n bytes from host memory into dst starting at offset
// off: the data phase of an ATA write command. n must be a positive
// multiple of SectorSize and no more than the host memory programmed. An
// error from dst.WriteAt is returned wrapped. In Streaming mode a dst that
// lends its buffers (ReserveWriterAt) is written through them instead,
// straight from host memory.
func (e *Engine) HostToDevice(dst io.WriterAt, off, n int64) error {
	return e.transfer(ToDevice, nil, dst, off, n)
}

// transfer runs one transfer in the engine's mode, after checking it, and
// records it (Last, Stats).
func (e *Engine) transfer(dir Direction, src io.ReaderAt, dst io.WriterAt, off, n int64) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if !e.mu.TryLock() {
		return ErrBusy
	}
	defer e.mu.Unlock()
	if err := e.check(off, n); err != nil {
		return err
	}
	e.dir, e.src, e.dst, e.off, e.n = dir, src, dst, off, n
	e.prodErr = nil
	t0 := e.clock.Now()
	rec := Transfer{Direction: dir, Mode: e.mode, Offset: off, Sectors: n / SectorSize, Start: t0}

	prod := side{t: t0}
	e.cons = side{t: t0}
	prod.cur.seek(&e.sg, 0)
	e.cons.cur.seek(&e.sg, 0)
	e.resetModel(t0)

	pr, rw := e.lent()
	var err error
	switch {
	case e.mode == StoreAndForward:
		err = e.storeAndForward(&prod, &rec)
	case pr != nil:
		rec.Inline = true
		err = e.peekLent(&prod, pr)
	case rw != nil:
		rec.Inline = true
		err = e.reserveLent(&prod, rw)
	case n <= e.inline:
		rec.Inline = true
		err = e.streamInline(&prod)
	default:
		err = e.stream(&prod, &rec)
	}
	e.src, e.dst = nil, nil
	e.f.Reset()
	e.record(&rec, &prod, err)
	return err
}

// check refuses a transfer the engine cannot run: closed, a length that is
// not a positive number of sectors, no host memory or too little.
func (e *Engine) check(off, n int64) error {
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
	return nil
}

// record completes rec from the two sides of the transfer and its error,
// and makes it the engine's Last and part of its Stats.
func (e *Engine) record(rec *Transfer, prod *side, err error) {
	cons := &e.cons
	rec.Bytes = cons.pos
	rec.Chunks = prod.steps
	rec.Copies = prod.cur.copies + cons.cur.copies
	rec.CopiedBytes = prod.copied + cons.copied
	rec.End = e.endTime(prod, cons)
	if e.mode == Streaming {
		rec.Interrupts = 2
	}
	rec.Completions = 1
	rec.Err = err

	e.statMu.Lock()
	e.last = *rec
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
}

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
