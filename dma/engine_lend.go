package dma

import (
	"errors"
	"fmt"
	"io"
)

// errLoan reports a lent buffer of a length the contract rules out: empty,
// longer than asked, or not whole sectors.
var errLoan = errors.New("dma: backend lent a buffer of a wrong length")

// lent returns the backend's lending interface for the transfer in
// progress, if it has one and the mode uses it.
func (e *Engine) lent() (PeekReaderAt, ReserveWriterAt) {
	if e.mode != Streaming {
		return nil, nil
	}
	if e.dir == ToHost {
		pr, _ := e.src.(PeekReaderAt)
		return pr, nil
	}
	rw, _ := e.dst.(ReserveWriterAt)
	return nil, rw
}

// checkLoan checks a buffer lent for the rest of the transfer from pos.
func (e *Engine) checkLoan(p []byte, pos int64) error {
	if len(p) == 0 || len(p)%SectorSize != 0 || int64(len(p)) > e.n-pos {
		return fmt.Errorf("%w: %d bytes for %d at %d", errLoan, len(p), e.n-pos, e.off+pos)
	}
	return nil
}

// tapWrite shows p to a tap that does not copy; a CopyTap sees the data
// as the engine copies it.
func (e *Engine) tapWrite(s *side, p []byte) error {
	if e.tap == nil || e.ctap != nil {
		return nil
	}
	if m, err := e.tap.Write(p); err != nil || m != len(p) {
		if err == nil {
			err = io.ErrShortWrite
		}
		s.err = fmt.Errorf("dma: tap: %w", err)
		return s.err
	}
	return nil
}

// stepLent accounts for nb sectors moved through a lent buffer, by both
// sides, in the engine's chunks: the same steps, and the same modelled
// time, as an inline transfer through the FIFO.
func (e *Engine) stepLent(prod *side, nb int) {
	for nb > 0 {
		k := min(nb, e.chunk)
		e.advance(prod, k, e.dir == ToHost, e.free, e.ready)
		prod.steps++
		e.advance(&e.cons, k, e.dir == ToDevice, e.ready, e.free)
		nb -= k
	}
}

// peekLent is a streaming transfer from a backend that lends its buffers:
// each lent buffer straight into host memory, the tap seeing it on the
// way. A failed PeekAt ends the transfer after the sectors before it
// reached the host.
func (e *Engine) peekLent(prod *side, pr PeekReaderAt) error {
	e.startStreaming(prod)
	cons := &e.cons
	for prod.pos < e.n {
		p, err := pr.PeekAt(e.off+prod.pos, int(e.n-prod.pos))
		if err != nil {
			e.prodErr = fmt.Errorf("dma: device read of %d bytes at %d: %w", e.n-prod.pos, e.off+prod.pos, err)
			return e.prodErr
		}
		if err := e.checkLoan(p, prod.pos); err != nil {
			pr.ReleasePeek()
			return err
		}
		if err := e.tapWrite(cons, p); err != nil {
			pr.ReleasePeek()
			return err
		}
		cons.cur.copyIn(&e.sg, p, e.ctap)
		cons.copied += int64(len(p))
		pr.ReleasePeek()
		e.stepLent(prod, len(p)/SectorSize)
	}
	return nil
}

// reserveLent is a streaming transfer to a backend that lends its
// buffers: host memory straight into each lent buffer, the tap seeing it
// on the way, then committed. A failed ReserveAt or CommitReserved ends
// the transfer; a buffer the tap refused is committed empty.
func (e *Engine) reserveLent(prod *side, rw ReserveWriterAt) error {
	e.startStreaming(prod)
	cons := &e.cons
	for cons.pos < e.n {
		p, err := rw.ReserveAt(e.off+cons.pos, int(e.n-cons.pos))
		if err != nil {
			cons.err = fmt.Errorf("dma: device write of %d bytes at %d: %w", e.n-cons.pos, e.off+cons.pos, err)
			return cons.err
		}
		if err := e.checkLoan(p, cons.pos); err != nil {
			return errors.Join(err, rw.CommitReserved(0))
		}
		prod.cur.copyOut(&e.sg, p, e.ctap)
		prod.copied += int64(len(p))
		if err := e.tapWrite(cons, p); err != nil {
			return errors.Join(err, rw.CommitReserved(0))
		}
		if err := rw.CommitReserved(len(p)); err != nil {
			cons.err = fmt.Errorf("dma: device write of %d bytes at %d: %w", len(p), e.off+cons.pos, err)
			return cons.err
		}
		e.stepLent(prod, len(p)/SectorSize)
	}
	return nil
}
