package dma

import (
	"fmt"
	"io"
)

// streamInline runs both sides here, in turns: the producer moves a chunk
// into the FIFO, the consumer moves every sector committed to it out. The
// FIFO is empty at the start of each turn, so neither side ever waits.
func (e *Engine) streamInline(prod *side) error {
	e.startStreaming(prod)
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
