package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/pipeline"
)

// disk is what the workload knows about the device's contents: a
// bridge.Verifier, which writes known data and checks every read against
// what was written last. Lane i of n owns the blocks b with b%n == i, so
// lanes never touch each other's blocks and the expected contents stay
// exact at any depth.
type disk struct {
	*bridge.Verifier
	bs     int
	blocks int
}

func newDisk(span int64, bs int, seed uint64) *disk {
	return &disk{Verifier: bridge.NewVerifier(span, bs, seed), bs: bs, blocks: int(span / int64(bs))}
}

// op is one host command: the unit the lane's pipeline carries.
type op struct {
	write bool
	block uint64
	sum   uint16 // the checksum the bridge computed
}

// budget ends a phase: after ops commands (if > 0) or at deadline.
type budget struct {
	ops      int64
	deadline time.Time
}

// lane is one host thread driving one bridge: the host side of a command
// stream through the ATA registers.
type lane struct {
	br    *bridge.Bridge
	disk  *disk
	id, n int
	buf   []byte
	rng   *rand.Rand
	next  uint64 // sequential cursor among the lane's blocks
	count uint64 // blocks the lane owns

	// Per phase.
	w        Workload
	b        budget
	issued   int64
	rd, wr   pipeline.Histogram
	execTime time.Duration
	verified int64
	bytes    int64
	p        *pipeline.Pipeline
}

func newLane(b *bridge.Bridge, dk *disk, id, n int, seed uint64) *lane {
	l := &lane{br: b, disk: dk, id: id, n: n, buf: make([]byte, dk.bs), rng: rand.New(rand.NewPCG(seed, uint64(id)))}
	l.count = uint64((dk.blocks - id + n - 1) / n)
	src := pipeline.SourceFunc[op](l.nextOp)
	st := pipeline.StageFunc[op, op](l.execOp)
	sink := pipeline.SinkFunc[op](l.verifyOp)
	p, err := pipeline.Then(pipeline.From("host", src), "bridge", st).
		Size(func(op) int { return dk.bs }).
		To("verify", sink)
	if err != nil {
		panic(err) // a programming error: the stages are fixed
	}
	p.Instrument = true
	l.p = p
	return l
}

// nextOp is the host choosing its next command and, for a write, filling
// its buffer with the new generation of the block.
func (l *lane) nextOp(ctx context.Context) (op, error) {
	if l.b.ops > 0 {
		if l.issued >= l.b.ops {
			return op{}, io.EOF
		}
	} else if l.issued&7 == 0 && time.Now().After(l.b.deadline) {
		return op{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return op{}, err
	}
	l.issued++
	var k uint64
	if l.w.Random {
		k = l.rng.Uint64N(l.count)
	} else {
		k = l.next
		l.next++
		if l.next == l.count {
			l.next = 0
		}
	}
	o := op{block: uint64(l.id) + k*uint64(l.n)}
	o.write = l.w.ReadPct < 100 && (l.w.ReadPct == 0 || l.rng.IntN(100) >= l.w.ReadPct)
	if o.write {
		l.disk.Fill(l.buf, l.off(o))
	}
	return o, nil
}

func (l *lane) execOp(ctx context.Context, o op) (op, error) {
	t0 := time.Now()
	sum, err := l.exec(o)
	dt := time.Since(t0)
	if err != nil {
		return o, err
	}
	l.execTime += dt
	if o.write {
		l.wr.Record(dt)
	} else {
		l.rd.Record(dt)
	}
	o.sum = sum
	return o, nil
}

func (l *lane) off(o op) int64 { return int64(o.block) * int64(l.disk.bs) }

// exec runs o through the bridge and returns the checksum it computed.
func (l *lane) exec(o op) (uint16, error) {
	off := l.off(o)
	var err error
	if o.write {
		err = l.br.Write(l.buf, off)
	} else {
		err = l.br.Read(l.buf, off)
	}
	if err != nil {
		return 0, fmt.Errorf("at byte %d: %w", off, err)
	}
	return l.br.Sum(), nil
}

// verifyOp checks a read's every byte against what was written, and the
// bridge's checksum of either direction against the data's.
func (l *lane) verifyOp(ctx context.Context, o op) error {
	if want := l.disk.Sum(l.buf, l.off(o)); o.sum != want {
		return fmt.Errorf("block %d: bridge checksum %#04x, data's %#04x", o.block, o.sum, want)
	}
	if !o.write {
		if err := l.disk.Check(l.buf, l.off(o)); err != nil {
			return err
		}
	}
	l.verified++
	l.bytes += int64(l.disk.bs)
	return nil
}

// phaseResult is what one phase of a workload did.
type phaseResult struct {
	Name      string           `json:"name"`
	BlockSize int              `json:"block_size"`
	ReadPct   int              `json:"read_pct"`
	Random    bool             `json:"random"`
	Depth     int              `json:"depth"`
	Ops       int64            `json:"ops"`
	Bytes     int64            `json:"bytes"`
	Verified  int64            `json:"verified"` // commands whose data and checksum were checked
	Wall      time.Duration    `json:"wall_ns"`
	Exec      time.Duration    `json:"exec_ns"`  // time inside the bridge, summed over lanes
	Rate      float64          `json:"rate_Bps"` // bytes over the wall time
	IOPS      float64          `json:"iops"`     // commands over the wall time
	Read      pipeline.Latency `json:"read_latency"`
	Write     pipeline.Latency `json:"write_latency"`
	QoS       *qos             `json:"qos,omitempty"`
	Pipeline  *pipeline.Report `json:"pipeline,omitempty"` // lane 0's instrumented run
}

// qos is the SSD seed's latency limits and whether the phase met them.
type qos struct {
	ReadP99Limit  time.Duration `json:"read_p99_limit_ns"`
	WriteP99Limit time.Duration `json:"write_p99_limit_ns"`
	ReadMet       bool          `json:"read_met"`
	WriteMet      bool          `json:"write_met"`
}

// runPhase runs w on every lane at once until b is spent.
func runPhase(ctx context.Context, lanes []*lane, w Workload, b budget) (phaseResult, error) {
	res := phaseResult{Name: w.Name, BlockSize: w.BlockSize, ReadPct: w.ReadPct, Random: w.Random, Depth: len(lanes)}
	var wg sync.WaitGroup
	errs := make([]error, len(lanes))
	reps := make([]pipeline.Report, len(lanes))
	t0 := time.Now()
	for i, l := range lanes {
		l.w, l.b = w, b
		if b.ops > 0 {
			// Split the commands evenly over the lanes.
			l.b.ops = b.ops / int64(len(lanes))
			if int64(i) < b.ops%int64(len(lanes)) {
				l.b.ops++
			}
			if l.b.ops == 0 {
				continue
			}
		}
		l.issued, l.execTime, l.verified, l.bytes = 0, 0, 0, 0
		l.rd.Reset()
		l.wr.Reset()
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = l.p.Run(ctx)
		}()
	}
	wg.Wait()
	res.Wall = time.Since(t0)
	var rd, wr pipeline.Histogram
	for i, l := range lanes {
		if errs[i] != nil {
			return res, fmt.Errorf("%s: lane %d: %w", w.Name, i, errs[i])
		}
		res.Ops += l.verified
		res.Verified += l.verified
		res.Bytes += l.bytes
		res.Exec += l.execTime
		rd.Merge(&l.rd)
		wr.Merge(&l.wr)
	}
	res.Read, res.Write = rd.Summary(), wr.Summary()
	if s := res.Wall.Seconds(); s > 0 {
		res.Rate = float64(res.Bytes) / s
		res.IOPS = float64(res.Ops) / s
	}
	if w.ReadP99 > 0 || w.WriteP99 > 0 {
		q := &qos{ReadP99Limit: time.Duration(w.ReadP99 * float64(time.Microsecond)), WriteP99Limit: time.Duration(w.WriteP99 * float64(time.Microsecond))}
		q.ReadMet = res.Read.P99 <= q.ReadP99Limit
		q.WriteMet = res.Write.P99 <= q.WriteP99Limit
		res.QoS = q
	}
	rep := reps[0]
	res.Pipeline = &rep
	return res, nil
}
