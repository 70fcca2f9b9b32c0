package tcp

import (
	"sync/atomic"
	"time"
)

// Where an I/O queue's commands run. The reader runs a command itself
// while the queue's commands have been quick (and always a read lent by
// the backend or a page handed to it, which cost no copy): waking another
// goroutine would cost more than the command. Once they are slow, the
// reader hands them to workers, started as needed up to one per entry of
// the queue (or Server.QueueWorkers), so a slow backend serves a queue's
// commands concurrently while the reader takes the next ones; their
// completions go out in the order they finish, which NVMe allows. The admin queue runs its commands
// one at a time, in the reader. nbd's server decides the same way
// (nbd/server_request.go, quickRead and inline).

// inlineBudget is the average Exec time under which the reader runs an
// I/O command itself.
const inlineBudget = int64(20 * time.Microsecond)

// run runs slot i's command, whose data is data, here or on a worker.
func (c *conn) run(i uint16, data []byte) error {
	if c.work == nil || c.execNs.Load() < inlineBudget {
		return c.exec(i, data)
	}
	c.slots[i].arg = data
	if c.idle.Load() == 0 && c.workers < c.maxWorkers() {
		c.workers++
		c.idle.Add(1)
		c.wg.Add(1)
		go c.worker()
	}
	c.work <- i // never blocks: one place per slot
	return nil
}

// maxWorkers is how many workers the queue may start (Server.QueueWorkers).
func (c *conn) maxWorkers() int {
	if n := c.s.QueueWorkers; n > 0 {
		return min(n, len(c.slots))
	}
	return len(c.slots)
}

// worker runs the commands handed to it until stopWorkers. A write error
// of a completion closes the connection, which the reader then meets.
func (c *conn) worker() {
	defer c.wg.Done()
	for i := range c.work {
		c.idle.Add(-1)
		sl := &c.slots[i]
		data := sl.arg
		sl.arg = nil
		c.exec(i, data)
		c.idle.Add(1)
	}
}

// stopWorkers waits for the commands handed to workers to complete.
func (c *conn) stopWorkers() {
	if c.work != nil {
		close(c.work)
		c.wg.Wait()
	}
}

// timeExec folds the duration of an Exec into the queue's moving average
// (weight 1/8).
func (c *conn) timeExec(start time.Time) { average(&c.execNs, start) }

func average(avg *atomic.Int64, start time.Time) {
	d := int64(time.Since(start))
	for {
		old := avg.Load()
		if avg.CompareAndSwap(old, old+(d-old)/8) {
			return
		}
	}
}
