package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/pipeline"
)

// job is one fio-style run.
type job struct {
	URI         string
	RW          string // read, write, randread, randwrite, randrw
	MixRead     int    // percent of reads for randrw
	BS          int64
	IODepth     int
	Runtime     time.Duration
	Connections int
	Size        int64         // 0: the whole export
	Engine      string        // goroutines (the default) or async
	Splice      bool          // nbd.WithSplicedWrites
	ReplySpin   time.Duration // nbd.WithReplySpin
}

// result is what a job measured.
type result struct {
	Job     job
	Elapsed time.Duration
	Read    stats
	Write   stats
}

type stats struct {
	Ops   int64
	Bytes int64
	Hist  pipeline.Histogram
}

func (j *job) validate() error {
	switch j.RW {
	case "read", "write", "randread", "randwrite", "randrw":
	default:
		return fmt.Errorf("rw=%q: want read, write, randread, randwrite or randrw", j.RW)
	}
	if j.BS <= 0 || j.BS > 64<<20 {
		return fmt.Errorf("bs=%d: want 1 byte to 64 MiB", j.BS)
	}
	if j.IODepth < 1 || j.IODepth > 4096 {
		return fmt.Errorf("iodepth=%d: want 1 to 4096", j.IODepth)
	}
	if j.MixRead < 0 || j.MixRead > 100 {
		return fmt.Errorf("rwmixread=%d: want 0 to 100", j.MixRead)
	}
	switch j.Engine {
	case "":
		j.Engine = "goroutines"
	case "goroutines", "async":
	default:
		return fmt.Errorf("engine=%q: want goroutines or async", j.Engine)
	}
	if j.Runtime <= 0 {
		return fmt.Errorf("runtime=%v: want > 0", j.Runtime)
	}
	if j.Connections < 1 {
		j.Connections = 1
	}
	return nil
}

// run connects, runs the job for its runtime and returns the figures.
func (j job) run(ctx context.Context) (*result, error) {
	if err := j.validate(); err != nil {
		return nil, err
	}
	inflight := max(nbd.DefaultClientMaxInFlight, (j.IODepth+j.Connections-1)/j.Connections)
	opts := []nbd.Option{nbd.WithConnections(j.Connections), nbd.WithMaxInFlight(inflight)}
	opts = append(opts, nbd.WithReplySpin(j.ReplySpin))
	if j.Splice {
		opts = append(opts, nbd.WithSplicedWrites())
	}
	c, err := nbd.Dial(ctx, j.URI, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	size := c.Size()
	if j.Size > 0 && j.Size < size {
		size = j.Size
	}
	blocks := size / j.BS
	if blocks < 1 {
		return nil, fmt.Errorf("export of %d bytes is smaller than bs=%d", size, j.BS)
	}
	j.Connections = c.Connections()
	res := &result{Job: j}
	var (
		sh      = shared{blocks: blocks, start: time.Now()}
		wg      sync.WaitGroup
		mu      sync.Mutex
		errOnce error
	)
	workers, work := j.IODepth, j.worker
	if j.Engine == "async" {
		workers, work = 1, j.asyncWorker
	}
	for w := range workers {
		wg.Go(func() {
			rd, wr, err := work(c, w, &sh)
			mu.Lock()
			res.Read.merge(&rd)
			res.Write.merge(&wr)
			if err != nil && errOnce == nil {
				errOnce = err
			}
			mu.Unlock()
		})
	}
	select {
	case <-time.After(j.Runtime):
	case <-ctx.Done():
	}
	sh.stop.Store(true)
	wg.Wait()
	res.Elapsed = time.Since(sh.start)
	if errOnce != nil {
		return res, fmt.Errorf("I/O error: %w", errOnce)
	}
	if res.Read.Ops+res.Write.Ops == 0 {
		return res, errors.New("no request completed")
	}
	return res, nil
}

// shared is what the workers of one run share.
type shared struct {
	blocks int64
	start  time.Time
	next   atomic.Int64 // sequential jobs: next block
	stop   atomic.Bool
}

// worker keeps one request in flight until sh.stop, as fio's iodepth
// counts them, and returns its figures.
func (j *job) worker(c *nbd.Client, w int, sh *shared) (rd, wr stats, err error) {
	r := rand.New(rand.NewPCG(uint64(w)+1, uint64(sh.start.UnixNano())))
	buf := randomBuffer(r, j.BS)
	for !sh.stop.Load() {
		off, read := j.next(r, sh)
		t0 := time.Now()
		if read {
			_, err = c.ReadAt(buf, off)
		} else {
			_, err = c.WriteAt(buf, off)
		}
		d := time.Since(t0)
		if err != nil {
			return rd, wr, err
		}
		st := &wr
		if read {
			st = &rd
		}
		st.Ops++
		st.Bytes += j.BS
		st.Hist.Record(d)
	}
	return rd, wr, nil
}

// next returns the offset and kind of the next request.
func (j *job) next(r *rand.Rand, sh *shared) (off int64, read bool) {
	var blk int64
	if j.RW == "read" || j.RW == "write" {
		blk = (sh.next.Add(1) - 1) % sh.blocks
	} else {
		blk = r.Int64N(sh.blocks)
	}
	read = j.RW == "read" || j.RW == "randread" || (j.RW == "randrw" && r.IntN(100) < j.MixRead)
	return blk * j.BS, read
}

// randomBuffer returns n bytes of r's output, a write's payload.
func randomBuffer(r *rand.Rand, n int64) []byte {
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	return buf
}

func (s *stats) merge(o *stats) {
	s.Ops += o.Ops
	s.Bytes += o.Bytes
	s.Hist.Merge(&o.Hist)
}

func (r *result) print(w io.Writer) {
	j := r.Job
	fmt.Fprintf(w, "nbdbench: rw=%s bs=%d iodepth=%d engine=%s splice=%v replyspin=%v connections=%d runtime=%v uri=%s\n",
		j.RW, j.BS, j.IODepth, j.Engine, j.Splice, j.ReplySpin, j.Connections, r.Elapsed.Round(time.Millisecond), j.URI)
	for _, x := range []struct {
		name string
		s    *stats
	}{{"read", &r.Read}, {"write", &r.Write}} {
		if x.s.Ops == 0 {
			continue
		}
		sec := r.Elapsed.Seconds()
		fmt.Fprintf(w, "  %-5s: IOPS=%.0f BW=%.1fMiB/s lat(us) p50=%.1f p99=%.1f p99.9=%.1f mean=%.1f ops=%d\n",
			x.name, float64(x.s.Ops)/sec, float64(x.s.Bytes)/sec/(1<<20),
			us(x.s.Hist.Quantile(0.50)), us(x.s.Hist.Quantile(0.99)), us(x.s.Hist.Quantile(0.999)),
			us(x.s.Hist.Mean()), x.s.Ops)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
