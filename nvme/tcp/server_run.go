package tcp

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/nvme"
)

// Where an I/O queue's commands run. A Read or Write on a backend that
// keeps requests in flight (nvme.AsyncReaderAt, nvme.AsyncWriterAt: an
// NBD client) is started by the reader and finished by a worker, which
// waits for the backend's requests in the order they started and, while
// more wait behind one, gathers their completions (at most maxHeld) into
// one writev: one worker keeps the whole queue in flight, so the queue
// is a goroutine pair. Any other command runs in the reader while the
// queue's commands have been quick (and always a read lent by the
// backend or a page handed to it, which cost no copy): waking another
// goroutine would cost more than the command. Once they are slow, the
// reader still runs those of an asynchronous backend itself (a Flush may
// wait for a request slot that only the worker's Waits free) and hands
// the others to the workers: Server.QueueWorkers of them (1 by default),
// so that a slow backend that cannot keep requests in flight serves that
// many of a queue's commands at once while the reader takes the next
// ones. Completions go out in the order commands finish, which NVMe
// allows. The admin queue runs its commands one at a time, in the
// reader. nbd's server decides the same way (nbd/server_request.go,
// quickRead and inline).

// noCancel is the context of an I/O queue's backend calls: a read or
// write run by Exec cannot be cancelled (io.ReaderAt and io.WriterAt
// take no context), so neither can those started on an asynchronous
// backend nor a Flush, Write Zeroes or deallocate. An NBD client whose
// server stops answering fails them when it is closed.
var noCancel = context.Background()

// inlineBudget is the average Exec time under which the reader runs an
// I/O command itself.
const inlineBudget = int64(20 * time.Microsecond)

// run runs slot i's command, whose data is data: it starts it for a
// worker to finish, runs it here, or hands it to a worker.
func (c *conn) run(i uint16, data []byte) error {
	if c.work == nil {
		return c.exec(i, data)
	}
	sl := &c.slots[i]
	if sl.paged {
		// The backend takes pages: quick, no copy, never asynchronous.
		return c.exec(i, nil)
	}
	if p, ok := c.q.Start(noCancel, &sl.cmd, data); ok {
		sl.pend, sl.started, sl.t0 = p, true, time.Now()
		return c.handOff(i)
	}
	if c.execNs.Load() < inlineBudget {
		return c.exec(i, data)
	}
	if c.q.Async(&sl.cmd) {
		// A Flush of an NBD client, say, may wait for a request slot
		// that only a worker's Waits free: it runs here, with the pen
		// down, while the workers go on.
		if err := c.release(); err != nil {
			return err
		}
		return c.exec(i, data)
	}
	sl.arg = data
	return c.handOff(i)
}

// handOff gives slot i to a worker, starting one if none is idle and the
// queue may have another.
func (c *conn) handOff(i uint16) error {
	if c.idle.Load() == 0 && c.workers < c.maxWorkers() {
		c.workers++
		c.idle.Add(1)
		c.wg.Add(1)
		go c.worker()
	}
	c.waiting.Add(1)
	c.work <- i // never blocks: one place per slot
	return nil
}

// maxWorkers is how many workers the queue may start (Server.QueueWorkers).
func (c *conn) maxWorkers() int {
	return min(max(c.s.QueueWorkers, 1), len(c.slots))
}

// worker runs the commands handed to it until stopWorkers. A write error
// of a completion closes the connection, which the reader then meets.
func (c *conn) worker() {
	defer c.wg.Done()
	gathered := 0 // completions queued and not yet written
	for i := range c.work {
		c.waiting.Add(-1)
		c.idle.Add(-1)
		sl := &c.slots[i]
		if sl.started {
			// While more started commands wait behind this one, its
			// completion joins theirs in one writev (at most maxHeld).
			// It is queued before the count of commands waiting is
			// read, so that the worker taking the last of them, this
			// one or another, finds it queued and writes it.
			c.finishStarted(i)
			gathered++
			if c.waiting.Load() == 0 || gathered >= maxHeld {
				c.writeGathered()
				gathered = 0
			}
		} else {
			data := sl.arg
			sl.arg = nil
			c.exec(i, data)
			if gathered > 0 { // a command held (never completed) writes nothing
				c.writeGathered()
			}
			gathered = 0
		}
		c.idle.Add(1)
	}
}

// finishStarted waits for the backend's request of slot i, which the
// reader started, and queues its completion for whoever writes next.
func (c *conn) finishStarted(i uint16) {
	sl := &c.slots[i]
	sl.cpl = c.q.Finish(noCancel, &sl.cmd, sl.pend)
	sl.pend, sl.started = nvme.Pending{}, false
	average(&c.execNs, sl.t0)
	c.setSQHead(sl)
	c.wmu.Lock()
	c.queue = append(c.queue, kindResp|uint32(i))
	c.wmu.Unlock()
}

// writeGathered writes the completions a worker queued, unless someone
// is writing (who then writes them).
func (c *conn) writeGathered() error {
	c.wmu.Lock()
	if c.writing || len(c.queue) == 0 {
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	return c.writeQueued()
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
