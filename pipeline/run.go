package pipeline

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// epoch anchors the pipeline's clock: now() is monotonic nanoseconds since
// the package was loaded.
var epoch = time.Now()

func now() int64 { return int64(time.Since(epoch)) }

// errStop is what a segment returns when its context stopped it: not a
// failure of its own.
var errStop = errors.New("pipeline: stopped")

// node is what the pipeline knows of a stage, whatever its unit types, and
// what the stage did in the last run. A node is written only by the
// goroutine of its segment while the pipeline runs, and read after.
type node struct {
	name  string
	index int
	link  Link
	seg   int
	pl    *Pipeline

	units uint64 // units completed
	state State
	err   *StageError
	stats *stats // nil when not instrumented
}

// stats are a node's instrumentation.
type stats struct {
	busy    int64 // nanoseconds in Next, Process or Consume
	waitIn  int64 // nanoseconds waiting for input on the link before it
	waitOut int64 // nanoseconds waiting for room on the link after it
	queued  int64 // nanoseconds its units spent in the link before it
	bytes   uint64
	hist    Histogram // per-unit time in Next, Process or Consume
}

// segment is a run of stages joined by inline links: one goroutine.
type segment struct {
	p           *Pipeline
	index       int
	first, last int    // node indexes
	head        runner // the source or the head of the link before first
	link        interface{ reset() }
	out         closer // the link after last, nil for the sink's

	ctx    context.Context
	cancel context.CancelFunc
}

// runner runs a segment's loop. It checks halt, set once ctx is done, before
// each unit (a load, cheaper than polling ctx.Done), so a segment of stages
// that never block still stops.
type runner interface {
	run(ctx context.Context, halt *atomic.Bool) error
}

// consumer is the runtime form of a stage as seen from the stage before it
// on the same goroutine: push hands it one unit, with the unit's entry time
// and the time now (both 0 when not instrumented), and returns the time its
// part of the segment finished.
type consumer[T any] interface {
	push(ctx context.Context, v T, origin, t int64) (int64, error)
}

// fail records err, returned by node n on its current unit, as a failure,
// unless n's context was done: then n was stopped and err is not its own.
func (p *Pipeline) fail(ctx context.Context, n *node, err error) error {
	return p.failUnit(ctx, n, n.units, err, n.seg)
}

// failUnit records err on unit of node n and cancels segment cancelSeg and
// every one upstream (all of them with AbortOnError). Of several failures
// of one node the one of the earliest unit is kept.
func (p *Pipeline) failUnit(ctx context.Context, n *node, unit uint64, err error, cancelSeg int) error {
	if ctx.Err() != nil {
		return errStop
	}
	se := &StageError{Stage: n.name, Index: n.index, Unit: unit, Err: err}
	p.mu.Lock()
	if n.err == nil || unit < n.err.Unit {
		n.err = se
	}
	if p.first == nil || (p.first.Index == n.index && unit < p.first.Unit) {
		p.first = se
	}
	p.mu.Unlock()
	switch {
	case p.AbortOnError:
		p.cancel(se)
	case cancelSeg >= 0:
		p.segs[cancelSeg].cancel() // this segment and every one upstream
	}
	return se
}

// sourceHead runs a segment that starts with the source.
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
			t1 := now()
			st.busy += t1 - t
			st.hist.record(t1 - t)
			if h.size != nil {
				st.bytes += uint64(h.size(v))
			}
			t = t1
		}
		if t, err = h.next.push(ctx, v, origin, t); err != nil {
			return err
		}
	}
}

// linkHead runs a segment that starts after an overlapped link.
type linkHead[T any] struct {
	nd   *node // the segment's first stage
	lk   link[T]
	next consumer[T]
}

func (h *linkHead[T]) run(ctx context.Context, halt *atomic.Bool) error {
	st := h.nd.stats
	var t int64
	if st != nil {
		t = now()
	}
	for {
		if halt.Load() {
			return errStop
		}
		v, sp, err := h.lk.get(ctx)
		if err != nil {
			switch err {
			case io.EOF:
				return nil
			case errStop: // the stream was cut, not ended
				return errStop
			}
			return h.nd.pl.fail(ctx, h.nd, err)
		}
		if st != nil {
			if h.lk.getWaited() {
				t1 := now()
				st.waitIn += t1 - t
				t = t1
			}
			// The unit arrived at t (or was already there): it was in
			// the link since it was sent.
			st.queued += max(t-sp.sent, 0)
		}
		t, err = h.next.push(ctx, v, sp.origin, t)
		h.lk.release()
		if err != nil {
			return err
		}
	}
}

// linkTail ends a segment: it puts units into the link to the next one.
type linkTail[T any] struct {
	nd *node // the segment's last stage
	lk sender[T]
}

func (n *linkTail[T]) push(ctx context.Context, v T, origin, t int64) (int64, error) {
	if err := n.lk.put(ctx, v, stamp{origin, t}); err != nil {
		// The unit was not handed on: the stage did not complete it.
		n.nd.units--
		return t, n.nd.pl.fail(ctx, n.nd, err)
	}
	if st := n.nd.stats; st != nil && n.lk.putWaited() {
		t1 := now()
		st.waitOut += t1 - t
		t = t1
	}
	return t, nil
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
		t1 := now()
		st.busy += t1 - t
		st.hist.record(t1 - t)
		if n.size != nil {
			st.bytes += uint64(n.size(out))
		}
		t = t1
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
		t1 := now()
		st.busy += t1 - t
		st.hist.record(t1 - t)
		if n.size != nil {
			st.bytes += uint64(n.size(v))
		}
		n.p.e2e.record(t1 - origin)
		t = t1
	}
	return t, nil
}

// run state kept on the Pipeline while Run is in progress.
type runState struct {
	mu     sync.Mutex
	first  *StageError
	cancel context.CancelCauseFunc
}

// Run runs the pipeline until the source returns io.EOF and the sink has
// consumed every unit, until a stage fails, or until ctx is done, and
// returns the report of the run. Every goroutine Run starts has ended when
// it returns.
//
// The error is nil after a complete run; the first stage's error, as a
// *StageError, after a failure (see AbortOnError for what the other stages
// do); and context.Cause(ctx) when ctx stopped the run first. The report is
// filled in every case: how many units each stage completed, its state,
// and, with Instrument, its timing.
//
// A panic in a stage is not recovered: like any goroutine's, it ends the
// program.
func (p *Pipeline) Run(ctx context.Context) (Report, error) {
	if !p.running.CompareAndSwap(false, true) {
		return Report{}, ErrRunning
	}
	defer p.running.Store(false)
	p.reset()
	runCtx, cancel := context.WithCancelCause(ctx)
	p.cancel = cancel
	p.contexts(runCtx)

	var cpu0 time.Duration
	if p.Instrument {
		cpu0 = cpuTime()
	}
	start := time.Now()
	var wg sync.WaitGroup
	last := len(p.segs) - 1
	for i := range last {
		wg.Go(func() { p.segs[i].run() })
	}
	p.segs[last].run()
	wg.Wait()
	wall := time.Since(start)
	var cpu time.Duration
	if p.Instrument {
		cpu = cpuTime() - cpu0
	}
	for i := range p.segs {
		p.segs[i].cancel()
	}
	cancel(nil)

	var err error
	switch {
	case p.first != nil:
		err = p.first
	case ctx.Err() != nil && p.nodes[len(p.nodes)-1].state == StateStopped:
		// A context done after the sink saw the end did not stop the run.
		err = context.Cause(ctx)
	}
	r := p.report(wall, err)
	r.CPU = cpu
	for i := range p.segs {
		p.segs[i].ctx, p.segs[i].cancel = nil, nil
	}
	p.cancel = nil
	return r, err
}

// reset clears what the last run left in the stages, their statistics and
// the links.
func (p *Pipeline) reset() {
	p.first = nil
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
	for i := range p.segs {
		if p.segs[i].link != nil {
			p.segs[i].link.reset()
		}
	}
}

// contexts gives each segment its context under the run's. Each segment's
// context is a child of the next one's, so cancelling a segment stops it
// and everything upstream while the stages downstream drain what was
// already queued for them.
func (p *Pipeline) contexts(runCtx context.Context) {
	parent := runCtx
	for i := len(p.segs) - 1; i >= 0; i-- {
		p.segs[i].ctx, p.segs[i].cancel = context.WithCancel(parent)
		parent = p.segs[i].ctx
	}
}

// run runs the segment to its end and records how its stages ended.
func (s *segment) run() {
	// A flag of its own for each run: AfterFunc runs its function on a
	// goroutine of its own, possibly after unhook, so a flag shared across
	// runs could be set by the last run's cancellation.
	halt := new(atomic.Bool)
	halt.Store(s.ctx.Err() != nil) // AfterFunc would set it late
	unhook := context.AfterFunc(s.ctx, func() { halt.Store(true) })
	err := s.head.run(s.ctx, halt)
	unhook()
	if err != nil {
		// Nothing upstream may wait for a segment that has ended early
		// (its context is done already, unless its input was cut).
		s.cancel()
	}
	if s.out != nil {
		s.out.close(err == errStop)
	}
	var se *StageError
	failed := -1
	if errors.As(err, &se) && s.p.nodes[se.Index].seg == s.index {
		failed = se.Index
	}
	for i := s.first; i <= s.last; i++ {
		n := s.p.nodes[i]
		switch {
		case i == failed:
			n.state = StateFailed
		case err == nil, failed >= 0 && i > failed:
			n.state = StateDone
		default:
			n.state = StateStopped
		}
	}
}
