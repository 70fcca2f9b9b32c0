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
	Front     model.Rate `json:"front_Bps"`    // ATA + DMA over a memory disk, less the memory disk's own time
	Back      model.Rate `json:"back_Bps"`     // the bare NBD client doing the bridge's requests
	Model     model.Rate `json:"model_Bps"`    // the cascade model from Front and Back
	ModelKind string     `json:"model"`        // "series" or "pipelined"
	Measured  model.Rate `json:"measured_Bps"` // the bridge end to end
	Error     float64    `json:"model_error"`  // (Model-Measured)/Measured
	SpeedUp   float64    `json:"speed_up"`     // Measured over the row before's (1 for the first)
	Verified  int64      `json:"verified"`     // commands verified end to end
}

// table is this machine's Table 4.
type table struct {
	BlockSize int   `json:"block_size"`
	Chunk     int   `json:"chunk"`
	Rounds    int   `json:"rounds"`
	Rows      []row `json:"rows"`
	// Bare is the bare NBD client's rate per direction, one request per
	// command; Before and After the first and last rows' measured rates.
	Bare map[string]model.Rate `json:"bare_nbd_Bps"`
	// Mem is the memory disk's own rate (what the front-end runs subtract).
	Mem map[string]model.Rate `json:"memory_disk_Bps"`
}

// sample is bytes moved in a time.
type sample struct {
	bytes int64
	t     time.Duration
}

func (s sample) rate() model.Rate { return model.RateOf(s.bytes, s.t) }

// median of the rates of samples.
func median(ss []sample) model.Rate {
	r := make([]float64, len(ss))
	for i, s := range ss {
		r[i] = float64(s.rate())
	}
	slices.Sort(r)
	if len(r) == 0 {
		return 0
	}
	if len(r)%2 == 1 {
		return model.Rate(r[len(r)/2])
	}
	return model.Rate((r[len(r)/2-1] + r[len(r)/2]) / 2)
}

// bench is the state of the Table 4 measurements: for every variant a
// drive over the NBD client and one over a local memory disk, each with
// its host lane, and the bare NBD client and memory disk for the nodes.
type bench struct {
	bs, chunk int
	client    *nbd.Client
	mem       *nbd.MemDisk
	remote    *disk // the workload's view of the NBD disk
	local     *disk // the same for the memory disk
	e2e       []*lane
	front     []*lane
	buf       []byte
	cursor    map[string]uint64
}

func newBench(ctx context.Context, client *nbd.Client, remote *disk, bs, chunk int, seed uint64, sectors uint64) (*bench, error) {
	span := int64(len(remote.gens)) * int64(bs)
	b := &bench{bs: bs, chunk: chunk, client: client, remote: remote, buf: make([]byte, bs), cursor: map[string]uint64{}}
	b.mem = nbd.NewMemDisk(span)
	b.local = newDisk(span, bs, seed)
	for _, v := range variants {
		d, err := newDrive(v, client, sectors, bs, chunk)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.e2e = append(b.e2e, newLane(d, remote, 0, 1, seed+7))
		d, err = newDrive(v, b.mem, uint64(span/512), bs, chunk)
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

// laneSample runs l sequentially in one direction until bud is spent and
// returns the bytes and the time spent inside the bridge.
func laneSample(ctx context.Context, l *lane, write bool, bud budget) (sample, int64, error) {
	w := Workload{Name: "table", BlockSize: l.disk.bs, ReadPct: 100}
	if write {
		w.ReadPct = 0
	}
	res, err := runPhase(ctx, []*lane{l}, w, bud)
	return sample{res.Bytes, res.Exec}, res.Verified, err
}

// bareSample moves blocks sequentially with the backend's own ReadAt and
// WriteAt, in requests of chunk bytes, until bud is spent, timing only the
// requests. Writes rewrite each block with the content it already has, so
// the workload's record of the disk stays true.
func (b *bench) bareSample(ctx context.Context, name string, be ata.Backend, dk *disk, write bool, chunk int, bud budget) (sample, error) {
	var s sample
	key := fmt.Sprintf("%s/%v", name, write)
	n := int64(0)
	for {
		if bud.ops > 0 {
			if n >= bud.ops {
				break
			}
		} else if n&7 == 0 && time.Now().After(bud.deadline) {
			break
		}
		if err := ctx.Err(); err != nil {
			return s, err
		}
		n++
		blk := b.cursor[key]
		b.cursor[key] = (blk + 1) % uint64(len(dk.gens))
		off := int64(blk) * int64(b.bs)
		if write {
			dk.pat.fill(b.buf, blk, dk.gens[blk])
		}
		t0 := time.Now()
		for p := 0; p < b.bs; p += chunk {
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
				return s, fmt.Errorf("%s at byte %d: %w", name, off+int64(p), err)
			}
		}
		s.t += time.Since(t0)
		s.bytes += int64(b.bs)
	}
	return s, nil
}

// measure runs the rounds and builds the table. Each round measures every
// node and every variant once for slice, in the same order, so drift on a
// noisy machine spreads over all of them; the table takes medians.
func (b *bench) measure(ctx context.Context, rounds int, slice budget, prog *progress) (*table, error) {
	t := &table{BlockSize: b.bs, Chunk: b.chunk, Rounds: rounds, Bare: map[string]model.Rate{}, Mem: map[string]model.Rate{}}
	nv := len(variants)
	type series struct {
		front, e2e      [][]sample // per variant
		back, backChunk []sample
		mem, memChunk   []sample
		verified        []int64
	}
	dirs := []string{"read", "write"}
	all := map[string]*series{}
	for _, dir := range dirs {
		all[dir] = &series{front: make([][]sample, nv), e2e: make([][]sample, nv), verified: make([]int64, nv)}
	}
	next := func() budget {
		if slice.ops > 0 {
			return slice
		}
		return budget{deadline: time.Now().Add(time.Until(slice.deadline))}
	}
	sliceDur := time.Until(slice.deadline)
	for r := 0; r < rounds; r++ {
		for _, dir := range dirs {
			write := dir == "write"
			s := all[dir]
			for i := range variants {
				prog.set("Table 4: round %d/%d, %s, %s", r+1, rounds, dir, variants[i].Name)
				bud := slice
				if slice.ops == 0 {
					bud = budget{deadline: time.Now().Add(sliceDur)}
				}
				fs, _, err := laneSample(ctx, b.front[i], write, bud)
				if err != nil {
					return nil, fmt.Errorf("front end, %s: %w", variants[i].Name, err)
				}
				s.front[i] = append(s.front[i], fs)
				if slice.ops == 0 {
					bud = budget{deadline: time.Now().Add(sliceDur)}
				}
				es, nver, err := laneSample(ctx, b.e2e[i], write, bud)
				if err != nil {
					return nil, fmt.Errorf("bridge, %s: %w", variants[i].Name, err)
				}
				s.e2e[i] = append(s.e2e[i], es)
				s.verified[i] += nver
			}
			for _, chunked := range []bool{false, true} {
				chunk := b.bs
				if chunked {
					chunk = min(b.chunk, b.bs)
				}
				bud := next()
				if slice.ops == 0 {
					bud = budget{deadline: time.Now().Add(sliceDur)}
				}
				bs, err := b.bareSample(ctx, "nbd", b.client, b.remote, write, chunk, bud)
				if err != nil {
					return nil, fmt.Errorf("bare NBD client: %w", err)
				}
				if slice.ops == 0 {
					bud = budget{deadline: time.Now().Add(sliceDur)}
				}
				ms, err := b.bareSample(ctx, "memory disk", b.mem, b.local, write, chunk, bud)
				if err != nil {
					return nil, err
				}
				if chunked {
					s.backChunk, s.memChunk = append(s.backChunk, bs), append(s.memChunk, ms)
				} else {
					s.back, s.mem = append(s.back, bs), append(s.mem, ms)
				}
			}
		}
	}
	k := int64(b.bs)
	for _, dir := range dirs {
		s := all[dir]
		t.Bare[dir] = median(s.back)
		t.Mem[dir] = median(s.mem)
		var prev model.Rate
		for i, v := range variants {
			back, mem := median(s.back), median(s.mem)
			if v.Pipelined {
				back, mem = median(s.backChunk), median(s.memChunk)
			}
			front := less(median(s.front[i]), mem)
			rw := row{Variant: v, Dir: dir, Front: front, Back: back, Measured: median(s.e2e[i]), Verified: s.verified[i]}
			nodes := model.Cascade{model.RateNode("front end", front), model.RateNode("back end", back)}
			if v.Pipelined {
				rw.ModelKind = "pipelined"
				rw.Model = nodes.PipelinedFill(k, int64(min(b.chunk, b.bs)))
			} else {
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
			prev = rw.Measured
			t.Rows = append(t.Rows, rw)
		}
	}
	return t, nil
}

// less returns the rate of a node whose time per byte is a's less b's:
// the front end measured over a memory disk, without the memory disk.
func less(a, b model.Rate) model.Rate {
	if a <= 0 {
		return 0
	}
	if b <= 0 {
		return a
	}
	inv := 1/float64(a) - 1/float64(b)
	if inv <= 0 {
		return a
	}
	return model.Rate(1 / inv)
}
