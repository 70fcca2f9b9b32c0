package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/model"
)

// samples are one direction's measurements: per node and row, the mean
// time per command of each turn of blockOps commands.
type samples struct {
	write                      bool
	front, e2e                 []durs
	bridge                     []durs // e2e with the host's time left out
	back, backChunk, backAhead durs
	// the next block of each bare measurement
	blkWhole, blkChunk, blkDepth uint64
}

// startDir points every driver at its own part of the span for one
// direction. Every bridge and the bare backend in each of its three ways
// read (or write) their own part, each sequentially from its own start,
// all moving on alike: a block one of them has just read would be in the
// processor's cache for the next, and the bare backend, measured last in
// a round, would read hot what the bridges read cold. The front ends go
// on through their own disk.
func (m *measurer) startDir(write bool) *samples {
	nv := uint64(len(m.variants))
	s := &samples{write: write, front: make([]durs, nv), e2e: make([]durs, nv), bridge: make([]durs, nv)}
	parts := nv + 3
	for i := range m.variants {
		m.front[i].write, m.e2e[i].write = write, write
		m.e2e[i].next = uint64(i) * m.nblk / parts % m.nblk
		m.e2e[i].verified = 0
	}
	s.blkWhole, s.blkChunk, s.blkDepth = nv*m.nblk/parts, (nv+1)*m.nblk/parts, (nv+2)*m.nblk/parts
	return s
}

// round runs one turn of commands on every node of every row.
func (m *measurer) round(ctx context.Context, s *samples) error {
	for i, v := range m.variants {
		d, _, err := m.turn(m.front[i], m.timed[i])
		if err != nil {
			return fmt.Errorf("bridge: front end, %s: %w", v.Name, err)
		}
		s.front[i] = append(s.front[i], d)
		d, host, err := m.turn(m.e2e[i], nil)
		if err != nil {
			return fmt.Errorf("bridge: %s: %w", v.Name, err)
		}
		s.e2e[i] = append(s.e2e[i], d)
		s.bridge[i] = append(s.bridge[i], d-host)
	}
	d, err := m.bareTurn(ctx, &s.blkWhole, s.write, m.bs)
	if err != nil {
		return err
	}
	s.back = append(s.back, d)
	if m.chunk < m.bs {
		if d, err = m.bareTurn(ctx, &s.blkChunk, s.write, m.chunk); err != nil {
			return err
		}
	}
	// A command no larger than a chunk is one request either way.
	s.backChunk = append(s.backChunk, d)
	// The bare backend with the read-ahead's depth in flight, timed from
	// when the pipeline is full.
	if d, err = m.bareDepth(ctx, s.blkDepth, s.write, blockOps, max(warmOps, m.depth)); err != nil {
		return err
	}
	s.backAhead = append(s.backAhead, d)
	s.blkDepth = (s.blkDepth + blockOps) % m.nblk
	return nil
}

// bareTurn moves blockOps blocks from *blk on with the bare backend in
// requests of chunk bytes, moves *blk past them, and returns their mean
// time after the first warmOps.
func (m *measurer) bareTurn(ctx context.Context, blk *uint64, write bool, chunk int) (time.Duration, error) {
	var sum time.Duration
	for j := range blockOps {
		d, err := m.bareOp(ctx, (*blk+uint64(j))%m.nblk, write, chunk)
		if err != nil {
			return 0, err
		}
		if j >= warmOps {
			sum += d
		}
	}
	*blk = (*blk + blockOps) % m.nblk
	return sum / (blockOps - warmOps), nil
}

// turn runs blockOps commands on d and returns their mean time after the
// first warmOps, less the time in tb's calls when tb is not nil, and the
// mean time of the host's own calls in them.
func (m *measurer) turn(d *driver, tb *timedBackend) (time.Duration, time.Duration, error) {
	var sum, host time.Duration
	for j := range blockOps {
		if tb != nil {
			tb.t = 0
		}
		dt, err := d.step()
		if err != nil {
			return 0, 0, err
		}
		if tb != nil {
			dt -= tb.t
		}
		if j >= warmOps {
			sum += dt
			host += d.host
		}
	}
	return sum / (blockOps - warmOps), host / (blockOps - warmOps), nil
}

// start starts the bare backend's request for p at off.
func (m *measurer) start(ctx context.Context, write bool, p []byte, off int64) error {
	var h dma.Handle
	var err error
	if write {
		h, err = m.remote.StartWriteAt(ctx, p, off)
	} else {
		h, err = m.remote.StartReadAt(ctx, p, off)
	}
	if err == nil {
		m.calls = append(m.calls, h)
	}
	return err
}

// waitOldest waits for the oldest request in flight.
func (m *measurer) waitOldest(ctx context.Context) error {
	h := m.calls[0]
	m.calls = append(m.calls[:0], m.calls[1:]...)
	return m.remote.Wait(ctx, h)
}

// drain waits for every request in flight and returns err, or the first
// request's error.
func (m *measurer) drain(ctx context.Context, err error) error {
	for len(m.calls) > 0 {
		if werr := m.waitOldest(ctx); err == nil {
			err = werr
		}
	}
	return err
}

// bareOp moves block blk with the bare backend in requests of chunk bytes
// (as the bridge pipelined in chunks makes them: all in flight at once,
// up to MaxInFlight, unless Overlap) and returns the time they took. The
// host fills a write's data before the clock starts and checks a read's
// after it stops.
func (m *measurer) bareOp(ctx context.Context, blk uint64, write bool, chunk int) (time.Duration, error) {
	off := int64(blk) * int64(m.bs)
	if write {
		m.rhost.Fill(m.buf, off)
	}
	t0 := time.Now()
	var err error
	for p := 0; p < m.bs && err == nil; p += chunk {
		q := m.buf[p:min(p+chunk, m.bs)]
		switch {
		case chunk == m.bs || m.overlap:
			err = m.plain(write, q, off+int64(p))
		case len(m.calls) == MaxInFlight:
			if err = m.waitOldest(ctx); err == nil {
				err = m.start(ctx, write, q, off+int64(p))
			}
		default:
			err = m.start(ctx, write, q, off+int64(p))
		}
	}
	err = m.drain(ctx, err)
	d := time.Since(t0)
	if err == nil && !write {
		err = m.rhost.Check(m.buf, off)
	}
	if err != nil {
		return 0, fmt.Errorf("bridge: bare backend at byte %d: %w", off, err)
	}
	return d, nil
}

// plain makes one request with the backend's ReadAt or WriteAt.
func (m *measurer) plain(write bool, p []byte, off int64) error {
	if write {
		_, err := m.remote.WriteAt(p, off)
		return err
	}
	_, err := readFull(m.remote, p, off)
	return err
}

// bareDepth moves ops consecutive blocks from blk with the bare backend,
// m.depth requests in flight at once from this goroutine, as the bridge's
// read-ahead and write-behind keep them, and returns the time per block
// after the first warm (the clock starts once they are done, with the
// pipeline full). The host fills a block before it is written and checks
// a block once it is read, between the requests; the time of those calls
// is the host's (the front end's node counts it), not the backend's, and
// is left out.
func (m *measurer) bareDepth(ctx context.Context, blk uint64, write bool, ops, warm int) (time.Duration, error) {
	var host time.Duration // in Fill and Check since t0
	block := func(i int) (int64, []byte) {
		return int64((blk+uint64(i))%m.nblk) * int64(m.bs), m.bufs[i%m.depth]
	}
	start := func(i int) error {
		off, buf := block(i)
		if write {
			t := time.Now()
			m.rhost.Fill(buf, off)
			host += time.Since(t)
		}
		return m.start(ctx, write, buf, off)
	}
	check := func(i int) error {
		off, buf := block(i)
		t := time.Now()
		err := m.rhost.Check(buf, off)
		host += time.Since(t)
		return err
	}
	t0 := time.Now()
	var err error
	for i := 0; i < min(m.depth, ops) && err == nil; i++ {
		err = start(i)
	}
	// Wait for each block in turn and start the one m.depth blocks on;
	// after an error, only drain what is in flight.
	for i := 0; len(m.calls) > 0; i++ {
		werr := m.waitOldest(ctx)
		if err != nil {
			continue
		}
		if err = werr; err == nil && !write {
			err = check(i)
		}
		if err == nil && i+m.depth < ops {
			err = start(i + m.depth)
		}
		if i+1 == warm {
			t0, host = time.Now(), 0
		}
	}
	if err != nil {
		return 0, fmt.Errorf("bridge: bare backend, %d in flight, near block %d: %w", m.depth, blk, err)
	}
	return (time.Since(t0) - host) / time.Duration(ops-warm), nil
}

// rows adds one direction's rows to t: each row's nodes, the model's
// prediction from them, and the bridge measured whole.
func (m *measurer) rows(t *Measurement, s *samples) {
	k := int64(m.bs)
	dir := "read"
	if s.write {
		dir = "write"
	}
	rate := func(d time.Duration) model.Rate { return model.RateOf(k, d) }
	t.Bare[dir] = rate(s.back.median())
	t.BareAhead[dir] = rate(s.backAhead.median())
	if m.chunk < m.bs {
		n := int64(m.bs / m.chunk)
		fit, err := model.FitCost([]model.Sample{
			model.SampleOf(k, s.back.median()),
			model.SampleOf(int64(m.chunk), s.backChunk.median()/time.Duration(n)),
		})
		if err == nil {
			t.Request[dir] = fit.Cost
		}
	}
	var prev model.Rate
	for i, v := range m.variants {
		bk := s.back
		switch v.Pipelining {
		case AcrossCommands:
			bk = s.backAhead
		case InChunks:
			bk = s.backChunk
		}
		rw := Row{Variant: v, Dir: dir, Front: rate(s.front[i].median()), Back: rate(bk.median()),
			Measured: rate(s.e2e[i].median()), Bridge: rate(s.bridge[i].median()), Verified: m.e2e[i].verified}
		rw.model(k, int64(m.chunk))
		rw.SpeedUp = 1
		if i > 0 && prev > 0 {
			rw.SpeedUp = float64(rw.Measured / prev)
		}
		if v.Pipelining == Series {
			// Both pipelined rows compare with the series bridge.
			prev = rw.Measured
		}
		t.Rows = append(t.Rows, rw)
	}
}

// model fills in the model's side of a row of commands of k bytes.
func (rw *Row) model(k, chunk int64) {
	nodes := model.Cascade{model.RateNode("front end", rw.Front), model.RateNode("back end", rw.Back)}
	rw.ModelKind, rw.Model = "series", nodes.Series(k)
	switch rw.Variant.Pipelining {
	case AcrossCommands:
		// The back end keeps requests in flight (its node is the bare
		// backend with as many), but an NBD client has no goroutine of its
		// own: the bridge's goroutine sends each request and reads each
		// reply between its commands, so the front end's work lengthens
		// the back end's cycle rather than hiding under it, and the two
		// nodes are in series. With a processor for each end the slower
		// would set the pace (Pipelined), which the row keeps as its
		// bound.
		rw.Bound = nodes.Pipelined(k)
	case InChunks:
		// One command streams through both ends in chunks.
		rw.ModelKind, rw.Model = "fill", nodes.PipelinedFill(k, chunk)
	}
	if rw.Measured > 0 {
		rw.Error = float64(rw.Model-rw.Measured) / float64(rw.Measured)
	}
}
