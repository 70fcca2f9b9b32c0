package dma

import "errors"

// stream runs the producer here and the consumer on the worker,
// overlapping through the FIFO.
func (e *Engine) stream(prod *side, rec *Transfer) error {
	e.startStreaming(prod)
	if !e.workerOn {
		e.exited = make(chan struct{})
		e.workerOn = true
		go e.worker()
	}
	// The worker is told to start once the first chunk is in the FIFO
	// (or the producer failed): until then it would only wait, and a
	// worker woken early spins or parks again while the producer's
	// backend read (a network round trip) needs the processor. The first
	// chunk always fits, as the FIFO is empty.
	var err error
	for posted := false; prod.pos < e.n; {
		k := int(min(int64(e.chunk), (e.n-prod.pos)/SectorSize))
		err = e.produce(prod, k)
		if !posted {
			e.start.post()
			posted = true
		}
		if err != nil {
			break
		}
	}
	e.doneSeen = e.done.await(e.doneSeen, e.spin)
	if e.prodErr != nil {
		return e.prodErr
	}
	if e.cons.err != nil {
		return e.cons.err
	}
	return err
}

func (e *Engine) worker() {
	defer close(e.exited)
	for {
		e.startSeen = e.start.await(e.startSeen, e.spin)
		if e.quit.Load() {
			return
		}
		cons := &e.cons
		for cons.pos < e.n {
			k := int(min(int64(e.chunk), (e.n-cons.pos)/SectorSize))
			if err := e.consume(cons, k); err != nil {
				if !errors.Is(err, errProducer) {
					// Stop the producer; it reads the reason from cons.err.
					e.f.CloseWithError(err)
				}
				break
			}
		}
		e.done.post()
	}
}

// errProducer closes the FIFO when the producer failed: the consumer
// drains the sectors committed before the failure, then stops quietly, and
// the transfer returns the producer's error.
var errProducer = errors.New("dma: producer failed")
