package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// inflight is one request of the async engine: its call, buffer, kind and
// start time.
type inflight struct {
	call nbd.Call
	buf  []byte
	read bool
	t0   time.Time
}

// asyncWorker keeps j.IODepth requests in flight from one goroutine with
// StartRead/StartWrite, waiting for the oldest and starting the next in
// its place, as fio's libnbd engine does from its one thread. Latency is
// from the start of a request to the return of its Wait.
func (j *job) asyncWorker(c *nbd.Client, w int, sh *shared) (rd, wr stats, err error) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(w)+1, uint64(sh.start.UnixNano())))
	ring := make([]inflight, j.IODepth)
	for i := range ring {
		ring[i].buf = randomBuffer(r, j.BS)
	}
	start := func(f *inflight) (err error) {
		off, read := j.next(r, sh)
		f.read, f.t0 = read, time.Now()
		if read {
			f.call, err = c.StartRead(ctx, f.buf, off, 0)
		} else {
			f.call, err = c.StartWrite(ctx, f.buf, off, 0)
		}
		return err
	}
	started := 0
	defer func() { // wait for what is still in flight, errors or not
		for i := range started {
			ring[i].call.Wait(ctx)
		}
	}()
	for ; started < len(ring); started++ {
		if err := start(&ring[started]); err != nil {
			return rd, wr, err
		}
	}
	for i := 0; ; i = (i + 1) % len(ring) {
		f := &ring[i]
		err := f.call.Wait(ctx)
		f.call = nbd.Call{} // waited for: the deferred Wait returns at once
		if err != nil {
			return rd, wr, err
		}
		st := &wr
		if f.read {
			st = &rd
		}
		st.Ops++
		st.Bytes += j.BS
		st.Hist.Record(time.Since(f.t0))
		if sh.stop.Load() {
			return rd, wr, nil
		}
		if err := start(f); err != nil {
			return rd, wr, err
		}
	}
}
