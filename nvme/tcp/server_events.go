package tcp

import (
	"sync"

	"github.com/nhdkit/nhd/nvme"
)

// connEvents is a conn's nvme.Transport: the controller completes the
// Asynchronous Event Requests the conn holds, and aborts the conn when
// its association ends. Complete does not block: a completion the
// controller sends on its own is written by a goroutine of its own,
// which a host that does not read stalls until the connection closes
// (Server.ReplyTimeout, or its Keep Alive Timer expiring), not the
// controller.
type connEvents struct {
	c       *conn
	mu      sync.Mutex
	closed  bool
	held    []uint16          // slots of the commands the controller holds
	early   []nvme.Completion // completed before hold saw them held
	writing sync.WaitGroup    // Complete's writers
}

// hold records that the controller holds slot i's command, or sends its
// completion, as the reader sends any, if the controller completed it
// already.
func (e *connEvents) hold(i uint16) {
	e.mu.Lock()
	for k, cpl := range e.early {
		if cpl.CID == e.c.slots[i].cmd.CID {
			e.early = append(e.early[:k], e.early[k+1:]...)
			e.mu.Unlock()
			e.c.slots[i].cpl = cpl
			e.c.complete(i)
			return
		}
	}
	e.held = append(e.held, i)
	e.mu.Unlock()
}

// close stops completions: the writer is about to end.
func (e *connEvents) close() {
	e.mu.Lock()
	e.closed = true
	e.held, e.early = nil, nil
	e.mu.Unlock()
}

// wait waits for Complete's writers, which end once the connection is
// closed if not before.
func (e *connEvents) wait() { e.writing.Wait() }

// Complete sends the completion of a held command, without blocking.
func (e *connEvents) Complete(cpl nvme.Completion) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	for k, i := range e.held {
		if e.c.slots[i].cmd.CID == cpl.CID {
			e.held = append(e.held[:k], e.held[k+1:]...)
			e.c.slots[i].cpl = cpl
			e.writing.Add(1)
			go e.write(i)
			return
		}
	}
	e.early = append(e.early, cpl)
}

// write sends the completion of the command held in slot i (conn.send
// may be called from any goroutine).
func (e *connEvents) write(i uint16) {
	defer e.writing.Done()
	e.c.complete(i)
}

// Abort closes the connection; the reader then ends the queue.
func (e *connEvents) Abort() { e.c.nc.Close() }
