package nbd

import (
	"context"
	"errors"
	"syscall"
)

// produce walks the source in order and sends the copy's pieces to work:
// data in pieces of at most reqSize, zero extents (rounded inwards to the
// alignment; their unaligned edges are copied as data) in pieces of at
// most copyZeroPiece, or counted as skipped at once under
// DestinationIsZero. A source whose first BlockStatus answers ENOTSUP is
// copied as data.
func (c *copier) produce(ctx context.Context, work chan<- copyPiece) error {
	pl := copyPlanner{c: c, ctx: ctx, work: work}
	size := c.stats.Size
	b, ok := c.extents()
	if !ok {
		if err := pl.add(0, size, false); err != nil {
			return err
		}
		return pl.emit(true)
	}
	err := WalkExtents(ctx, b, 0, size, func(e ExtentAt) error {
		lo := (e.Offset + c.align - 1) / c.align * c.align
		hi := e.End() / c.align * c.align
		if !e.Zero() || lo >= hi {
			return pl.add(e.Offset, e.End(), false)
		}
		if err := pl.add(e.Offset, lo, false); err != nil {
			return err
		}
		if err := pl.add(lo, hi, true); err != nil {
			return err
		}
		return pl.add(hi, e.End(), false)
	})
	if err != nil && pl.end == 0 && errors.Is(err, syscall.ENOTSUP) {
		// The source cannot tell its allocation after all: all data.
		if err := pl.add(0, size, false); err != nil {
			return err
		}
		return pl.emit(true)
	}
	if err != nil {
		return err
	}
	return pl.emit(true)
}

// copyPlanner gathers neighbouring ranges of one kind and cuts them into
// pieces.
type copyPlanner struct {
	c        *copier
	ctx      context.Context
	work     chan<- copyPiece
	off, end int64 // the pending range, not sent yet
	zero     bool
}

// add appends [off, end) of one kind, sending what is pending before it
// if it is of the other kind, and the whole pieces the range now holds.
func (pl *copyPlanner) add(off, end int64, zero bool) error {
	if off >= end {
		return nil
	}
	if pl.end > pl.off && pl.zero != zero {
		if err := pl.emit(true); err != nil {
			return err
		}
	}
	if pl.end <= pl.off {
		pl.off, pl.zero = off, zero
	}
	pl.end = end
	return pl.emit(false)
}

// emit sends the whole pieces of the pending range, and the rest of it
// too if final.
func (pl *copyPlanner) emit(final bool) error {
	step := pl.c.reqSize
	if pl.zero {
		step = copyZeroPiece
	}
	for pl.end-pl.off >= step || final && pl.end > pl.off {
		p := copyPiece{off: pl.off, n: min(step, pl.end-pl.off), zero: pl.zero}
		pl.off += p.n
		if p.zero && pl.c.opts.DestinationIsZero {
			pl.c.done(p, true)
			continue
		}
		select {
		case pl.work <- p:
		case <-pl.ctx.Done():
			return pl.ctx.Err()
		}
	}
	return nil
}
