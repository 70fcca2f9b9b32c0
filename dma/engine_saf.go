package dma

// storeAndForward moves the transfer one sector at a time: the producer
// fills the one-sector FIFO, the consumer empties it, and only then does
// the next sector start (the handshake the CPU's interrupt stands for).
func (e *Engine) storeAndForward(prod *side, rec *Transfer) error {
	for prod.pos < e.n {
		rec.Interrupts++
		if err := e.produce(prod, 1); err != nil {
			return err
		}
		if err := e.consume(&e.cons, 1); err != nil {
			return err
		}
	}
	return nil
}
