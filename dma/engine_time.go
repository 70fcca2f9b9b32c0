package dma

import "time"

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

// resetModel starts the modelled time of a transfer at t0: every FIFO slot
// free and empty since then.
func (e *Engine) resetModel(t0 time.Duration) {
	for i := range e.ready {
		e.ready[i], e.free[i] = t0, t0
	}
}

// startStreaming accounts, in modelled time, for what precedes the data
// of a streaming transfer: the command interrupt and the software that
// programs the DMA. Both sides start after them.
func (e *Engine) startStreaming(prod *side) {
	if t := e.timing; t != nil {
		prod.t += t.Interrupt + t.Software
		e.cons.t = prod.t
	}
}

// endTime is when the transfer ends: with Timing, the modelled end (the
// later side, the DMA-done interrupt of a streaming transfer, the host's
// completion), to which the clock advances; without, the clock's now.
func (e *Engine) endTime(prod, cons *side) time.Duration {
	t := e.timing
	if t == nil {
		return e.clock.Now()
	}
	end := max(prod.t, cons.t)
	if e.mode == Streaming {
		end += t.Interrupt // the DMA-done interrupt
	}
	end += t.HostCompletion
	e.clock.AdvanceTo(end)
	return end
}
