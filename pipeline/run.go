package pipeline

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// epoch anchors the pipeline's clock: now() is monotonic nanoseconds since
// the package was loaded.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// errStop is what a stage's failure becomes when the run's context was
// done: the stage was stopped, the error is not its own.
var errStop = errors.New("pipeline: stopped")

// node is what the pipeline knows of a stage, whatever its unit types, and
// what the stage did in the last run.
type node struct {
	name  string
	index int
	pl    *Pipeline

	units uint64 // units completed
	state State
	err   *StageError
	stats *stats // nil when not instrumented
}

// stats are a node's instrumentation.
type stats struct {
	busy  int64 // nanoseconds in Next, Process or Consume
	bytes uint64
	hist  Histogram // per-unit time in Next, Process or Consume
}

// runner runs the pipeline's loop. It checks halt, set once ctx is done,
// before each unit (a load, cheaper than polling ctx.Done), so stages
// that never block still stop.
type runner interface {
	run(ctx context.Context, halt *atomic.Bool) error
}

// consumer is the runtime form of a stage as seen from the stage before
// it: push hands it one unit, with the unit's entry time and the time now
// (both 0 when not instrumented), and returns the time the rest of the
// pipeline finished with it.
type consumer[T any] interface {
	push(ctx context.Context, v T, origin, t int64) (int64, error)
}

// fail records err, returned by node n on its current unit, as the run's
// failure, unless ctx was done: then n was stopped and err is not its own.
func (p *Pipeline) fail(ctx context.Context, n *node, err error) error {
	if ctx.Err() != nil {
		return errStop
	}
	n.err = &StageError{Stage: n.name, Index: n.index, Unit: n.units, Err: err}
	return n.err
}

// record adds one unit's time from t to now, and its bytes, to st, and
// returns now.
func (st *stats) record(t int64, bytes int) int64 {
	t1 := now()
	st.busy += t1 - t
	st.hist.record(t1 - t)
	st.bytes += uint64(bytes)
	return t1
}

// sourceHead runs the pipeline from its source.
type sourceHead[T any] struct {
	nd   *node
	src  Source[T]
	size func(T) int
	next consumer[T]
}

func (h *sourceHead[T]) run(ctx context.Context, halt *atomic.Bool) error {
	nd, st := h.nd, h.nd.stats
	var t int64
	if st != nil {
		t = now()
	}
	for {
		if halt.Load() {
			return errStop
		}
		v, err := h.src.Next(ctx)
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return nd.pl.fail(ctx, nd, err)
		}
		nd.units++
		origin := t
		if st != nil {
			t = st.record(t, sizeOf(h.size, v))
		}
		if t, err = h.next.push(ctx, v, origin, t); err != nil {
			return err
		}
	}
}

func sizeOf[T any](f func(T) int, v T) int {
	if f == nil {
		return 0
	}
	return f(v)
}

// stageNode is a stage at work.
type stageNode[In, Out any] struct {
	nd   *node
	s    Stage[In, Out]
	size func(Out) int
	next consumer[Out]
}

func (n *stageNode[In, Out]) push(ctx context.Context, v In, origin, t int64) (int64, error) {
	out, err := n.s.Process(ctx, v)
	if err != nil {
		return t, n.nd.pl.fail(ctx, n.nd, err)
	}
	n.nd.units++
	if st := n.nd.stats; st != nil {
		t = st.record(t, sizeOf(n.size, out))
	}
	return n.next.push(ctx, out, origin, t)
}

// sinkNode is the sink at work; it records each unit's end-to-end time.
type sinkNode[T any] struct {
	nd   *node
	sink Sink[T]
	size func(T) int
	p    *Pipeline
}

func (n *sinkNode[T]) push(ctx context.Context, v T, origin, t int64) (int64, error) {
	if err := n.sink.Consume(ctx, v); err != nil {
		return t, n.p.fail(ctx, n.nd, err)
	}
	n.nd.units++
	if st := n.nd.stats; st != nil {
		t = st.record(t, sizeOf(n.size, v))
		n.p.e2e.record(t - origin)
	}
	return t, nil
}

// Run runs the pipeline on the calling goroutine until the source returns
// io.EOF and the sink has consumed every unit, until a stage fails, or
// until ctx is done, and returns the report of the run. It starts no
// goroutine.
//
// The error is nil after a complete run; the failed stage's error, as a
// *StageError, after a failure (the sink has then consumed exactly the
// units before the failed one); and context.Cause(ctx) when ctx stopped
// the run first. The report is filled in every case: how many units each
// stage completed, its state, and, with Instrument, its timing.
//
// A panic in a stage is not recovered.
func (p *Pipeline) Run(ctx context.Context) (Report, error) {
	if !p.running.CompareAndSwap(false, true) {
		return Report{}, ErrRunning
	}
	defer p.running.Store(false)
	p.reset()
	var cpu0 time.Duration
	if p.Instrument {
		cpu0 = cpuTime()
	}
	start := time.Now()
	halt := new(atomic.Bool)
	halt.Store(ctx.Err() != nil) // AfterFunc would set it late
	unhook := context.AfterFunc(ctx, func() { halt.Store(true) })
	err := p.head.run(ctx, halt)
	unhook()
	wall := time.Since(start)
	var cpu time.Duration
	if p.Instrument {
		cpu = cpuTime() - cpu0
	}
	var se *StageError
	failed := len(p.nodes)
	switch {
	case errors.As(err, &se):
		failed = se.Index
	case err != nil:
		err = context.Cause(ctx)
	}
	for i, n := range p.nodes {
		switch {
		case i == failed:
			n.state = StateFailed
		case err == nil, i > failed:
			n.state = StateDone
		default:
			n.state = StateStopped
		}
	}
	r := p.report(wall, err)
	r.CPU = cpu
	return r, err
}

// reset clears what the last run left in the stages and their statistics.
func (p *Pipeline) reset() {
	for _, n := range p.nodes {
		n.units, n.state, n.err = 0, StateIdle, nil
		switch {
		case !p.Instrument:
			n.stats = nil
		case n.stats == nil:
			n.stats = new(stats)
		default:
			*n.stats = stats{}
		}
	}
	if p.Instrument {
		if p.e2e == nil {
			p.e2e = new(Histogram)
		} else {
			p.e2e.Reset()
		}
	}
}
