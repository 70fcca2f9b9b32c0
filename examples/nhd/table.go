package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/nbd"
)

// A row of Table 4: one datapath variant in one direction, its two nodes
// measured apart, the model's prediction from them and the bridge
// measured whole.
type row struct {
	Variant   bridge.Variant `json:"variant"`
	Dir       string         `json:"direction"`
	Front     model.Rate     `json:"front_Bps"` // host + ATA + DMA over an in-cache memory disk, the disk's own calls taken out
	Back      model.Rate     `json:"back_Bps"`  // the bare NBD client doing the bridge's requests
	Model     model.Rate     `json:"model_Bps"` // the cascade model from Front and Back
	ModelKind string         `json:"model"`     // "series" or "fill"
	// Bound is, for the row pipelined across commands, the rate of the
	// slower end alone (Cascade.Pipelined): what the overlap would reach
	// with a processor for each end.
	Bound    model.Rate `json:"bound_Bps,omitempty"`
	Measured model.Rate `json:"measured_Bps"` // the bridge end to end
	Error    float64    `json:"model_error"`  // (Model-Measured)/Measured
	SpeedUp  float64    `json:"speed_up"`     // Measured over the row before's (1 for the first); a pipelined row's over the last series row's
	Verified int64      `json:"verified"`     // commands verified end to end
}

// table is this machine's Table 4.
type table struct {
	BlockSize int   `json:"block_size"`
	Chunk     int   `json:"chunk"`
	Commands  int   `json:"commands"` // commands per node and variant, per direction
	Rows      []row `json:"rows"`
	// Bare is the bare NBD client's rate per direction, one request per
	// command.
	Bare map[string]model.Rate `json:"bare_nbd_Bps"`
	// Ahead is the number of requests the bridge pipelined across commands
	// keeps in flight, and BareAhead the bare NBD client's rate per
	// direction with as many in flight: that row's back end.
	Ahead     int                   `json:"ahead"`
	BareAhead map[string]model.Rate `json:"bare_nbd_ahead_Bps"`
	// Request is the NBD back end's cost per request, fitted (model.FitCost)
	// to the bare client's times for whole commands and for chunks (those
	// of a command in flight together, as the bridge makes them), per
	// direction: what pipelining in chunks pays once per extra request.
	Request map[string]model.Cost `json:"nbd_request_cost"`
}

// durs is a series of per-command times.
type durs []time.Duration

// median returns the middle time (the mean of the two middle ones).
func (d durs) median() time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// bench is the state of the Table 4 measurements: for every variant a
// bridge over the NBD client and one over a local memory disk (its front
// end alone), each with its host lane, and the bare NBD client (the back
// end alone).
type bench struct {
	bs, chunk, ahead int
	overlap          bool
	variants         []bridge.Variant
	client           *nbd.Client
	remote, local    *disk // the workload's view of the NBD disk and of the memory disk
	e2e, front       []*lane
	// frontBE times the memory disk under each front-end bridge, so that
	// the front end is measured without its backend: the back end node
	// is the NBD client's.
	frontBE []*timedBackend
	buf     []byte
	bufs    [][]byte   // one per request in flight, for the bare client at the read-ahead's depth
	calls   []nbd.Call // the bare client's requests in flight
}

func newBench(ctx context.Context, c *config, client *nbd.Client, remote *disk, sectors uint64) (*bench, error) {
	bs := remote.bs
	b := &bench{bs: bs, chunk: min(c.Chunk, bs), ahead: c.Ahead, overlap: c.Overlap, variants: bridge.Table4(),
		client: client, remote: remote, buf: make([]byte, bs), calls: make([]nbd.Call, 0, bridge.MaxInFlight)}
	for range b.ahead {
		b.bufs = append(b.bufs, make([]byte, bs))
	}
	// The front end's memory disk is small enough to stay in the cache.
	// Its calls are timed and taken out of the front end's time: in the
	// bridge the NBD client does that part, and the back end node measures
	// it (counted in both, the model would be pessimistic by that much).
	local := min(int64(len(remote.gens))*int64(bs), max(2<<20, 4*int64(bs)))
	mem := nbd.NewMemDisk(local)
	b.local = newDisk(local, bs, c.Seed)
	for _, v := range b.variants {
		e2e, err := c.newBridge(v, client, sectors, bs)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.e2e = append(b.e2e, newLane(e2e, remote, 0, 1, c.Seed+7))
		tb := &timedBackend{Backend: mem}
		front, err := c.newBridge(v, tb, uint64(local/512), bs)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.frontBE = append(b.frontBE, tb)
		b.front = append(b.front, newLane(front, b.local, 0, 1, c.Seed+11))
	}
	// Fill the memory disk through the best bridge, as the remote one was.
	fill := Workload{Name: "fill", BlockSize: bs}
	if _, err := runPhase(ctx, b.front[len(b.front)-1:], fill, budget{ops: int64(len(b.local.gens))}); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *bench) Close() {
	for _, l := range append(b.e2e, b.front...) {
		l.br.Close()
	}
}

// timedBackend is a backend that adds up the time its calls take, for a
// bridge whose backend calls do not overlap each other: what a command
// spends in its backend, the rest being the front end's.
type timedBackend struct {
	ata.Backend
	t time.Duration
}

func (b *timedBackend) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.ReadAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

func (b *timedBackend) WriteAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.WriteAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

// blockOps is how many commands in a row each node and variant runs before
// the next one takes its turn.
const blockOps = 24

// warmOps is how many of a block's first commands are not kept: they pay
// for the switch from the block before (a DMA worker still spinning or
// just parked, caches holding other data), which the steady state the
// model describes does not.
const warmOps = 4

// start starts the bare client's request for p at off.
func (b *bench) start(write bool, p []byte, off int64) error {
	var c nbd.Call
	var err error
	if write {
		c, err = b.client.StartWrite(context.Background(), p, off, 0)
	} else {
		c, err = b.client.StartRead(context.Background(), p, off, 0)
	}
	if err == nil {
		b.calls = append(b.calls, c)
	}
	return err
}

// waitOldest waits for the oldest request in flight.
func (b *bench) waitOldest() error {
	c := b.calls[0]
	b.calls = append(b.calls[:0], b.calls[1:]...)
	return c.Wait(context.Background())
}

// bareOp moves block blk with the bare NBD client in requests of chunk
// bytes (as the bridge pipelined in chunks makes them: all in flight at
// once, up to bridge.MaxInFlight, unless -overlap) and returns the time
// they took. A write rewrites the block with the content it already has,
// so the workload's record of the disk stays true; a read is verified
// after the clock stops, as the host checks the bridge's reads.
func (b *bench) bareOp(dk *disk, blk uint64, write bool, chunk int) (time.Duration, error) {
	off := int64(blk) * int64(b.bs)
	if write {
		dk.pat.fill(b.buf, blk, dk.gens[blk])
	}
	t0 := time.Now()
	var err error
	for p := 0; p < b.bs && err == nil; p += chunk {
		q := b.buf[p:min(p+chunk, b.bs)]
		switch {
		case chunk == b.bs || b.overlap:
			err = b.plain(write, q, off+int64(p))
		case len(b.calls) == cap(b.calls):
			if err = b.waitOldest(); err == nil {
				err = b.start(write, q, off+int64(p))
			}
		default:
			err = b.start(write, q, off+int64(p))
		}
	}
	for len(b.calls) > 0 {
		if werr := b.waitOldest(); err == nil {
			err = werr
		}
	}
	d := time.Since(t0)
	if err == nil && !write {
		err = dk.pat.verify(b.buf, blk, dk.gens[blk])
	}
	if err != nil {
		return 0, fmt.Errorf("bare NBD client at byte %d: %w", off, err)
	}
	return d, nil
}

// plain makes one request with the client's ReadAt or WriteAt.
func (b *bench) plain(write bool, p []byte, off int64) error {
	if write {
		_, err := b.client.WriteAt(p, off)
		return err
	}
	m, err := b.client.ReadAt(p, off)
	if err == io.EOF && m == len(p) {
		err = nil
	}
	return err
}

// bareDepth moves ops consecutive blocks from blk with the NBD client,
// b.ahead requests in flight at once from this goroutine, as the bridge's
// read-ahead and write-behind keep them, and returns the time per block
// after the first warm (the clock starts once they are done, with the
// pipeline full). Like the host, it fills a block before writing it and
// verifies a block it has read.
func (b *bench) bareDepth(dk *disk, blk uint64, write bool, ops, warm int) (time.Duration, error) {
	nblk := uint64(len(dk.gens))
	block := func(i int) (uint64, []byte) { return (blk + uint64(i)) % nblk, b.bufs[i%b.ahead] }
	start := func(i int) error {
		k, buf := block(i)
		if write {
			dk.pat.fill(buf, k, dk.gens[k])
		}
		return b.start(write, buf, int64(k)*int64(b.bs))
	}
	t0 := time.Now()
	var err error
	for i := 0; i < min(b.ahead, ops) && err == nil; i++ {
		err = start(i)
	}
	// Wait for each block in turn and start the one b.ahead blocks on;
	// after an error, only drain what is in flight.
	for i := 0; len(b.calls) > 0; i++ {
		werr := b.waitOldest()
		if err != nil {
			continue
		}
		if k, buf := block(i); werr != nil || !write {
			err = cmpErr(werr, func() error { return dk.pat.verify(buf, k, dk.gens[k]) })
		}
		if err == nil && i+b.ahead < ops {
			err = start(i + b.ahead)
		}
		if i+1 == warm {
			t0 = time.Now()
		}
	}
	if err != nil {
		return 0, fmt.Errorf("bare NBD client, %d in flight, near block %d: %w", b.ahead, blk, err)
	}
	return time.Since(t0) / time.Duration(ops-warm), nil
}

// cmpErr returns err, or f's error when err is nil.
func cmpErr(err error, f func() error) error {
	if err != nil {
		return err
	}
	return f()
}

// samples are one direction's measurements: per node and variant, the
// mean time per command of each block of commands.
type samples struct {
	front, e2e                 []durs
	verified                   []int64
	back, backChunk, backAhead durs
	// the next block of each bare measurement
	blkWhole, blkChunk, blkDepth uint64
}

// measure builds the table. The nodes and the bridges are measured
// interleaved, blockOps commands at a time (every variant's front end and
// bridge, then the bare NBD client in whole commands, in chunks, and with
// the read-ahead's depth in flight, in turn) for per in each direction (at
// least minOps commands each), so that whatever else the machine does
// falls on all of them alike. Each block gives a mean time per command (a
// pipelined bridge's commands alternate between finding their data fetched
// and waiting for it, so only a mean over several is its rate), and each is
// summarised by the median of its blocks: on a shared machine the mean of
// everything mostly measures the neighbours.
func (b *bench) measure(ctx context.Context, per time.Duration, minOps int, prog *progress) (*table, error) {
	t := &table{BlockSize: b.bs, Chunk: b.chunk, Bare: map[string]model.Rate{}, Request: map[string]model.Cost{},
		Ahead: b.ahead, BareAhead: map[string]model.Rate{}}
	for _, dir := range []string{"read", "write"} {
		prog.set("Table 4: %s", dir)
		s := b.startDir(dir == "write")
		deadline := time.Now().Add(per)
		for n := 0; n < minOps || time.Now().Before(deadline); n += blockOps {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := b.round(ctx, dir == "write", s); err != nil {
				return nil, err
			}
		}
		t.Commands = len(s.back) * (blockOps - warmOps)
		b.rows(t, dir, s)
	}
	return t, nil
}

// startDir points every lane at its own part of the disk for one
// direction. Every bridge and the bare client in each of its three ways
// read (or write) their own part, each sequentially from its own start,
// all moving on alike: a block one of them has just read would be in the
// processor's cache for the next, and the bare client, measured last in a
// round, would read hot what the bridges read cold.
func (b *bench) startDir(write bool) *samples {
	nv := len(b.variants)
	s := &samples{front: make([]durs, nv), e2e: make([]durs, nv), verified: make([]int64, nv)}
	w := Workload{Name: "table-read", BlockSize: b.bs, ReadPct: 100}
	if write {
		w = Workload{Name: "table-write", BlockSize: b.bs}
	}
	nblk := uint64(len(b.remote.gens))
	parts := uint64(nv + 3)
	for i := range nv {
		for _, l := range []*lane{b.front[i], b.e2e[i]} {
			l.w, l.b, l.issued = w, budget{ops: 1 << 62}, 0
		}
		b.e2e[i].next = uint64(i) * nblk / parts % b.e2e[i].count
	}
	s.blkWhole, s.blkChunk, s.blkDepth = uint64(nv)*nblk/parts, uint64(nv+1)*nblk/parts, uint64(nv+2)*nblk/parts
	return s
}

// round runs one block of commands on every node of every variant.
func (b *bench) round(ctx context.Context, write bool, s *samples) error {
	for i, v := range b.variants {
		d, err := b.block(ctx, b.front[i], b.frontBE[i])
		if err != nil {
			return fmt.Errorf("front end, %s: %w", v.Name, err)
		}
		s.front[i] = append(s.front[i], d)
		if d, err = b.block(ctx, b.e2e[i], nil); err != nil {
			return fmt.Errorf("bridge, %s: %w", v.Name, err)
		}
		s.e2e[i] = append(s.e2e[i], d)
		s.verified[i] += blockOps
	}
	nblk := uint64(len(b.remote.gens))
	for _, c := range []int{b.bs, b.chunk} {
		out, blk := &s.back, &s.blkWhole
		if c != b.bs {
			out, blk = &s.backChunk, &s.blkChunk
		}
		var sum time.Duration
		for j := range blockOps {
			d, err := b.bareOp(b.remote, (*blk+uint64(j))%nblk, write, c)
			if err != nil {
				return err
			}
			if j >= warmOps {
				sum += d
			}
		}
		*out = append(*out, sum/(blockOps-warmOps))
		*blk = (*blk + blockOps) % nblk
	}
	// The bare client with the read-ahead's depth in flight, timed from
	// when the pipeline is full.
	d, err := b.bareDepth(b.remote, s.blkDepth, write, blockOps, max(warmOps, b.ahead))
	if err != nil {
		return err
	}
	s.backAhead = append(s.backAhead, d)
	s.blkDepth = (s.blkDepth + blockOps) % nblk
	return nil
}

// block runs blockOps commands on l and returns their mean time after the
// first warmOps, less the time in tb's calls when tb is not nil.
func (b *bench) block(ctx context.Context, l *lane, tb *timedBackend) (time.Duration, error) {
	var sum time.Duration
	for j := range blockOps {
		if tb != nil {
			tb.t = 0
		}
		d, err := l.step(ctx)
		if err != nil {
			return 0, err
		}
		if tb != nil {
			d -= tb.t
		}
		if j >= warmOps {
			sum += d
		}
	}
	return sum / (blockOps - warmOps), nil
}

// rows adds one direction's rows to t: each variant's nodes, the model's
// prediction from them, and the bridge measured whole.
func (b *bench) rows(t *table, dir string, s *samples) {
	k := int64(b.bs)
	rate := func(d time.Duration) model.Rate { return model.RateOf(k, d) }
	t.Bare[dir] = rate(s.back.median())
	t.BareAhead[dir] = rate(s.backAhead.median())
	if b.chunk < b.bs {
		n := int64(b.bs / b.chunk)
		fit, err := model.FitCost([]model.Sample{
			model.SampleOf(k, s.back.median()),
			model.SampleOf(int64(b.chunk), s.backChunk.median()/time.Duration(n)),
		})
		if err == nil {
			t.Request[dir] = fit.Cost
		}
	}
	var prev model.Rate
	for i, v := range b.variants {
		bk := s.back
		switch v.Pipelining {
		case bridge.AcrossCommands:
			bk = s.backAhead
		case bridge.InChunks:
			bk = s.backChunk
		}
		rw := row{Variant: v, Dir: dir, Front: rate(s.front[i].median()), Back: rate(bk.median()), Measured: rate(s.e2e[i].median()), Verified: s.verified[i]}
		nodes := model.Cascade{model.RateNode("front end", rw.Front), model.RateNode("back end", rw.Back)}
		rw.ModelKind, rw.Model = "series", nodes.Series(k)
		switch v.Pipelining {
		case bridge.AcrossCommands:
			// The back end keeps requests in flight (its node is the bare
			// client with as many), but the NBD client has no goroutine of
			// its own: the bridge's goroutine sends each request and reads
			// each reply between its commands, so the front end's work
			// lengthens the back end's cycle rather than hiding under it,
			// and the two nodes are in series. With a processor for each
			// end the slower would set the pace (Pipelined), which the row
			// keeps as its bound.
			rw.Bound = nodes.Pipelined(k)
		case bridge.InChunks:
			// One command streams through both ends in chunks.
			rw.ModelKind, rw.Model = "fill", nodes.PipelinedFill(k, int64(b.chunk))
		}
		if rw.Measured > 0 {
			rw.Error = float64(rw.Model-rw.Measured) / float64(rw.Measured)
		}
		rw.SpeedUp = 1
		if i > 0 && prev > 0 {
			rw.SpeedUp = float64(rw.Measured / prev)
		}
		if v.Pipelining == bridge.Series {
			// Both pipelined rows compare with the series bridge.
			prev = rw.Measured
		}
		t.Rows = append(t.Rows, rw)
	}
}
