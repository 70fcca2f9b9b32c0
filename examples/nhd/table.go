package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/nbd"
)

// A row of Table 4: one datapath variant in one direction, its two nodes
// measured apart, the model's prediction from them and the bridge
// measured whole.
type row struct {
	Variant   variant    `json:"variant"`
	Dir       string     `json:"direction"`
	Front     model.Rate `json:"front_Bps"` // host + ATA + DMA over an in-cache memory disk, the disk's own calls taken out
	Back      model.Rate `json:"back_Bps"`  // the bare NBD client doing the bridge's requests
	Model     model.Rate `json:"model_Bps"` // the cascade model from Front and Back
	ModelKind string     `json:"model"`     // "series" or "fill"
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
// drive over the NBD client (the bridge) and one over a local memory disk
// (its front end alone), each with its host lane, and the bare NBD client
// (the back end alone).
type bench struct {
	bs, chunk int
	client    *nbd.Client
	mem       *nbd.MemDisk
	remote    *disk // the workload's view of the NBD disk
	local     *disk // the same for the memory disk
	e2e       []*lane
	front     []*lane
	// frontBE times the memory disk under each front-end drive, so that
	// the front end is measured without its backend: the back end node
	// is the NBD client's.
	frontBE []*timedBackend
	buf     []byte
	ahead   int           // requests in flight for the variant pipelined across commands
	async   *asyncBackend // the bare client keeping a command's chunks in flight, as the bridge does
	bufs    [][]byte      // one per request in flight, for the bare client at that depth
	deep    *asyncBackend // the bare client keeping b.ahead requests in flight
}

func newBench(ctx context.Context, client *nbd.Client, remote *disk, bs int, tu tuning, seed uint64, sectors uint64) (*bench, error) {
	chunk := tu.Chunk
	span := int64(len(remote.gens)) * int64(bs)
	b := &bench{bs: bs, chunk: chunk, client: client, remote: remote, buf: make([]byte, bs), ahead: max(tu.Ahead, 1)}
	for range b.ahead {
		b.bufs = append(b.bufs, make([]byte, bs))
	}
	b.deep = newAsyncBackend(client, b.ahead)
	if !tu.Overlap {
		b.async = newAsyncBackend(client, max(1, bs/max(1, min(chunk, bs))))
	}
	// The front end's memory disk is small enough to stay in the cache.
	// Its calls (one cached copy per command, 2.5-3.5 us per 64 KiB) are
	// timed and taken out of the front end's time: in the bridge the NBD
	// client does that part, and the back end node measures it. Counting
	// it in both nodes made the model pessimistic by that much (README).
	local := min(span, max(2<<20, 4*int64(bs)))
	b.mem = nbd.NewMemDisk(local)
	b.local = newDisk(local, bs, seed)
	for _, v := range variants {
		d, err := newDrive(v, client, sectors, bs, tu)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.e2e = append(b.e2e, newLane(d, remote, 0, 1, seed+7))
		tb := &timedBackend{Backend: b.mem}
		b.frontBE = append(b.frontBE, tb)
		d, err = newDrive(v, tb, uint64(local/512), bs, tu)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.front = append(b.front, newLane(d, b.local, 0, 1, seed+11))
	}
	// Fill the memory disk through the best drive, as the remote one was.
	fill := Workload{Name: "fill", BlockSize: bs}
	if _, err := runPhase(ctx, b.front[len(b.front)-1:], fill, budget{ops: int64(len(b.local.gens))}); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *bench) Close() {
	for _, l := range append(b.e2e, b.front...) {
		l.d.Close()
	}
}

// timedBackend is a backend that adds up the time its calls take, for a
// drive whose backend calls do not overlap each other: what a command
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

// warmOps is how many of a block's first commands are not kept.
const warmOps = 4

// bareOp moves block blk with the backend's own ReadAt or WriteAt, in
// requests of chunk bytes, and returns the time the requests took. A
// write rewrites the block with the content it already has, so the
// workload's record of the disk stays true.
func (b *bench) bareOp(be ata.Backend, dk *disk, blk uint64, write bool, chunk int) (time.Duration, error) {
	off := int64(blk) * int64(b.bs)
	if write {
		dk.pat.fill(b.buf, blk, dk.gens[blk])
	}
	t0 := time.Now()
	if chunk < b.bs && b.async != nil {
		// As the bridge pipelined in chunks makes them: every chunk's
		// request in flight at once (up to as many as it keeps).
		a := b.async
		for p := 0; p < b.bs; {
			var err error
			started := p
			for ; p < b.bs && a.n < len(a.calls) && err == nil; p += chunk {
				q := min(p+chunk, b.bs)
				if write {
					err = a.StartWriteAt(b.buf[p:q], off+int64(p))
				} else {
					err = a.StartReadAt(b.buf[p:q], off+int64(p))
				}
			}
			for a.n > 0 {
				if werr := a.pop(); err == nil {
					err = werr
				}
			}
			if err != nil {
				return 0, fmt.Errorf("in bytes %d to %d: %w", off+int64(started), off+int64(p), err)
			}
		}
	}
	for p := 0; p < b.bs && (chunk == b.bs || b.async == nil); p += chunk {
		q := min(p+chunk, b.bs)
		var err error
		if write {
			_, err = be.WriteAt(b.buf[p:q], off+int64(p))
		} else {
			var m int
			m, err = be.ReadAt(b.buf[p:q], off+int64(p))
			if err == io.EOF && m == q-p {
				err = nil
			}
		}
		if err != nil {
			return 0, fmt.Errorf("at byte %d: %w", off+int64(p), err)
		}
	}
	d := time.Since(t0)
	if !write {
		// Checked after the clock stops, as the host checks the bridge's
		// reads: the data are right, and the caches hold what they hold
		// in the bridge when its next request goes out.
		if err := dk.pat.verify(b.buf, blk, dk.gens[blk]); err != nil {
			return 0, fmt.Errorf("bare NBD client: %w", err)
		}
	}
	return d, nil
}

// bareDepth moves ops consecutive blocks from blk with the NBD client, b.ahead
// requests in flight at once from this goroutine, as the bridge's
// read-ahead and write-behind keep them (nbd.Client.StartRead,
// StartWrite, through b.deep), and returns the time per block after the
// first warm (the clock starts once they are done, with the pipeline full).
// Like the host, it fills a block before writing it and verifies a block it
// has read.
func (b *bench) bareDepth(dk *disk, blk uint64, write bool, ops, warm int) (time.Duration, error) {
	nblk := uint64(len(dk.gens))
	depth := b.ahead
	t0 := time.Now()
	start := func(i int) error {
		k := (blk + uint64(i)) % nblk
		buf, off := b.bufs[i%depth], int64(k)*int64(b.bs)
		if write {
			dk.pat.fill(buf, k, dk.gens[k])
			return b.deep.StartWriteAt(buf, off)
		}
		return b.deep.StartReadAt(buf, off)
	}
	var err error
	started := 0
	for started < min(depth, ops) && err == nil {
		if err = start(started); err == nil {
			started++
		}
	}
	// Wait for each block in turn and start the one depth blocks on; after
	// an error, only drain what is in flight.
	for i := 0; i < started; i++ {
		werr := b.deep.pop()
		if err != nil {
			continue
		}
		if err = werr; err == nil && !write {
			k := (blk + uint64(i)) % nblk
			err = dk.pat.verify(b.bufs[i%depth], k, dk.gens[k])
		}
		if err == nil && started < ops {
			if err = start(started); err == nil {
				started++
			}
		}
		if err != nil {
			err = fmt.Errorf("near block %d: %w", (blk+uint64(i))%nblk, err)
		}
		if i+1 == warm {
			t0 = time.Now()
		}
	}
	if err != nil {
		return 0, err
	}
	return time.Since(t0) / time.Duration(ops-warm), nil
}

// measure builds the table. The nodes and the bridges are measured
// interleaved, blockOps commands at a time (every variant's front end and
// bridge, then the bare NBD client in whole commands and in chunks, in
// turn) for per in each direction (at least minOps commands each), so that
// whatever else the machine does falls on all of them alike. Each block
// gives a mean time per command (a pipelined bridge's commands alternate
// between finding their data fetched and waiting for it, so only a mean
// over several is its rate), and each is summarised by the median of its
// blocks: on a shared machine the mean of everything mostly measures the
// neighbours.
func (b *bench) measure(ctx context.Context, per time.Duration, minOps int, prog *progress) (*table, error) {
	t := &table{BlockSize: b.bs, Chunk: min(b.chunk, b.bs), Bare: map[string]model.Rate{}, Request: map[string]model.Cost{},
		Ahead: b.ahead, BareAhead: map[string]model.Rate{}}
	nv := len(variants)
	k := int64(b.bs)
	chunk := min(b.chunk, b.bs)
	for _, dir := range []string{"read", "write"} {
		write := dir == "write"
		prog.set("Table 4: %s", dir)
		front, e2e := make([]durs, nv), make([]durs, nv)
		verified := make([]int64, nv)
		var back, backChunk, backAhead durs
		w := Workload{Name: "table-" + dir, BlockSize: b.bs, ReadPct: 100}
		if write {
			w.ReadPct = 0
		}
		for i := range nv {
			for _, l := range []*lane{b.front[i], b.e2e[i]} {
				l.w, l.b, l.issued = w, budget{ops: 1 << 62}, 0
			}
		}
		// Every bridge and the bare client in each of its three ways read
		// (or write) their own part of the disk, each sequentially from
		// its own start, all moving on alike: a block one of them has just
		// read would be in the processor's cache for the next, and the
		// bare client, measured last in a round, would read hot what the
		// bridges read cold.
		nblk := uint64(len(b.remote.gens))
		parts := uint64(nv + 3)
		for i, l := range b.e2e {
			l.next = uint64(i) * nblk / parts % l.count
		}
		blkWhole, blkChunk, blkDepth := uint64(nv)*nblk/parts, uint64(nv+1)*nblk/parts, uint64(nv+2)*nblk/parts
		deadline := time.Now().Add(per)
		// Each block's first commands are run but not kept: they pay for
		// the switch from the block before (a DMA worker still spinning or
		// just parked, caches holding other data), which the steady state
		// the model describes does not.
		for n := 0; n < minOps || time.Now().Before(deadline); n += blockOps {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			for i := range nv {
				for _, side := range []struct {
					l   *lane
					out *durs
					err string
				}{{b.front[i], &front[i], "front end"}, {b.e2e[i], &e2e[i], "bridge"}} {
					var sum time.Duration
					for j := range blockOps {
						var tb *timedBackend
						if side.l == b.front[i] {
							tb = b.frontBE[i]
							tb.t = 0
						}
						d, err := side.l.step(ctx)
						if err != nil {
							return nil, fmt.Errorf("%s, %s: %w", side.err, variants[i].Name, err)
						}
						if tb != nil {
							d -= tb.t
						}
						if side.l == b.e2e[i] {
							verified[i]++
						}
						if j >= warmOps {
							sum += d
						}
					}
					*side.out = append(*side.out, sum/(blockOps-warmOps))
				}
			}
			for _, c := range []int{b.bs, chunk} {
				out, blk := &back, &blkWhole
				if c != b.bs {
					out, blk = &backChunk, &blkChunk
				}
				var sum time.Duration
				for j := range blockOps {
					d, err := b.bareOp(b.client, b.remote, (*blk+uint64(j))%nblk, write, c)
					if err != nil {
						return nil, fmt.Errorf("bare NBD client: %w", err)
					}
					if j >= warmOps {
						sum += d
					}
				}
				*out = append(*out, sum/(blockOps-warmOps))
				*blk = (*blk + blockOps) % nblk
			}
			// The bare client with the read-ahead's depth in flight, timed
			// from when the pipeline is full.
			d, err := b.bareDepth(b.remote, blkDepth, write, blockOps, max(warmOps, b.ahead))
			if err != nil {
				return nil, fmt.Errorf("bare NBD client, %d in flight: %w", b.ahead, err)
			}
			backAhead = append(backAhead, d)
			blkDepth = (blkDepth + blockOps) % nblk
		}
		rate := func(d time.Duration) model.Rate { return model.RateOf(k, d) }
		t.Bare[dir] = rate(back.median())
		t.BareAhead[dir] = rate(backAhead.median())
		if chunk < b.bs {
			n := int64(b.bs / chunk)
			fit, err := model.FitCost([]model.Sample{
				model.SampleOf(k, back.median()),
				model.SampleOf(int64(chunk), backChunk.median()/time.Duration(n)),
			})
			if err == nil {
				t.Request[dir] = fit.Cost
			}
		}
		t.Commands = len(back) * (blockOps - warmOps)
		var prev model.Rate
		for i, v := range variants {
			bk := back.median()
			switch {
			case v.Ahead:
				bk = backAhead.median()
			case v.Pipelined:
				bk = backChunk.median()
			}
			fr := front[i].median()
			rw := row{Variant: v, Dir: dir, Front: rate(fr), Back: rate(bk), Measured: rate(e2e[i].median()), Verified: verified[i]}
			nodes := model.Cascade{model.RateNode("front end", rw.Front), model.RateNode("back end", rw.Back)}
			switch {
			case v.Ahead:
				// The back end keeps requests in flight (its node is the bare
				// client with as many), but the NBD client has no goroutine
				// of its own: the drive's goroutine sends each request and
				// reads each reply between its commands, so the front end's
				// work lengthens the back end's cycle rather than hiding
				// under it, and the two nodes are in series. With a
				// processor for each end the slower would set the pace
				// (Pipelined), which the row keeps as its bound.
				rw.ModelKind = "series"
				rw.Model = nodes.Series(k)
				rw.Bound = nodes.Pipelined(k)
			case v.Pipelined:
				// One command streams through both ends in chunks.
				rw.ModelKind = "fill"
				rw.Model = nodes.PipelinedFill(k, int64(chunk))
			default:
				rw.ModelKind = "series"
				rw.Model = nodes.Series(k)
			}
			if rw.Measured > 0 {
				rw.Error = float64(rw.Model-rw.Measured) / float64(rw.Measured)
			}
			rw.SpeedUp = 1
			if i > 0 && prev > 0 {
				rw.SpeedUp = float64(rw.Measured / prev)
			}
			if !v.Pipelined {
				// Both pipelined rows compare with the series bridge.
				prev = rw.Measured
			}
			t.Rows = append(t.Rows, rw)
		}
	}
	return t, nil
}
