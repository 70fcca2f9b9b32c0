package pipeline

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
)

// Parallel extends l by a stage that runs on workers goroutines at once:
// for stages whose units are independent and that mostly wait (an NBD
// request each, several in flight, like commands queued to a disk). mk(w)
// returns worker w's Stage, for w from 0 to workers-1; each is called from
// its own goroutine only, so workers need share nothing (a connection or a
// device each).
//
// Units are dealt to the workers in turn, each through a ring of capacity
// units, and put back in stream order after the stage: the stage after a
// Parallel one must take its input through a Ring link (its capacity is
// per worker). A worker's failure on unit k stops the pipeline like any
// stage's, and the units before k still reach the sink, in order; other
// workers may have completed units after k, which are dropped (the stage's
// Units counts them). The model counts a Parallel stage's time per unit
// divided by workers.
func Parallel[In, Out any](l *Line[In], capacity int, name string, workers int, mk func(worker int) Stage[In, Out]) *Line[Out] {
	b := l.take()
	nd := b.add(name, Link{kind: LinkParallel, capacity: capacity, workers: workers})
	switch {
	case mk == nil:
		b.fail(nd, ErrNil)
	case workers < 1 || capacity < 1:
		b.fail(nd, fmt.Errorf("%w: parallel stage of %d workers behind rings of %d", ErrLink, workers, capacity))
	}
	b.elems = append(b.elems, elem{build: func(p *Pipeline, next any) (any, error) {
		n := p.nodes[nd]
		out, ok := next.(*merge[Out])
		if !ok { // the next stage's entry refused its link
			return nil, fmt.Errorf("stage %d %q: %w: no ring after a parallel stage", nd, n.name, ErrLink)
		}
		h := &parallelHead[In, Out]{
			nd:     n,
			in:     newMerge[In](workers, capacity),
			out:    out,
			stages: make([]Stage[In, Out], workers),
			units:  make([]uint64, workers),
			ws:     make([]stats, workers),
		}
		h.size, _ = b.elems[nd].size.(func(Out) int)
		for w := range workers {
			if h.stages[w] = mk(w); h.stages[w] == nil {
				return nil, fmt.Errorf("stage %d %q worker %d: %w", nd, n.name, w, ErrNil)
			}
		}
		s := n.seg
		p.segs[s].head = h
		p.segs[s].link = h.in
		p.segs[s-1].out = h.in
		return &linkTail[In]{nd: p.nodes[nd-1], lk: h.in}, nil
	}})
	return &Line[Out]{b: b}
}

// merge is a set of rings, one per worker of a Parallel stage, used in turn:
// unit i goes through ring i mod n, on either side of the stage.
type merge[T any] struct {
	rings      []*ring[T]
	pseq, cseq uint64
	pwait      bool
}

func newMerge[T any](workers, capacity int) *merge[T] {
	m := &merge[T]{rings: make([]*ring[T], workers)}
	for i := range m.rings {
		m.rings[i] = newRing[T](capacity)
	}
	return m
}

func (m *merge[T]) reset() {
	for _, r := range m.rings {
		r.reset()
	}
	m.pseq, m.cseq = 0, 0
}

// put deals v to the next ring (the producer side before the stage).
func (m *merge[T]) put(ctx context.Context, v T, st stamp) error {
	r := m.rings[m.pseq%uint64(len(m.rings))]
	err := r.put(ctx, v, st)
	m.pwait = r.pwait
	if err != nil {
		return err
	}
	m.pseq++
	return nil
}

func (m *merge[T]) putWaited() bool { return m.pwait }
func (m *merge[T]) getWaited() bool { return m.rings[m.cseq%uint64(len(m.rings))].cwait }

// close closes every ring: the producer before the stage is done. After
// the stage each worker closes its own ring, so there close is not called.
func (m *merge[T]) close(cut bool) {
	for _, r := range m.rings {
		r.close(cut)
	}
}

// get takes the next unit in stream order (the consumer side after the
// stage): the stream ends at the first ring closed and drained.
func (m *merge[T]) get(ctx context.Context) (T, stamp, error) {
	return m.rings[m.cseq%uint64(len(m.rings))].get(ctx)
}

func (m *merge[T]) release() {
	m.rings[m.cseq%uint64(len(m.rings))].release()
	m.cseq++
}

// parallelHead runs a Parallel stage's workers.
type parallelHead[In, Out any] struct {
	nd       *node
	in       *merge[In]
	out      *merge[Out]
	stages   []Stage[In, Out]
	size     func(Out) int
	units    []uint64
	ws       []stats
	failedAt atomic.Uint64 // the earliest unit a worker failed on
}

func (h *parallelHead[In, Out]) run(ctx context.Context, halt *atomic.Bool) error {
	h.failedAt.Store(math.MaxUint64)
	clear(h.units)
	errs := make([]error, len(h.stages))
	var wg sync.WaitGroup
	for w := 1; w < len(h.stages); w++ {
		wg.Go(func() { errs[w] = h.work(ctx, halt, w) })
	}
	errs[0] = h.work(ctx, halt, 0)
	wg.Wait()

	nd := h.nd
	nd.units = 0
	for _, u := range h.units {
		nd.units += u
	}
	if st := nd.stats; st != nil {
		for i := range h.ws {
			w := &h.ws[i]
			st.busy += w.busy
			st.waitIn += w.waitIn
			st.waitOut += w.waitOut
			st.bytes += w.bytes
			st.hist.Merge(&w.hist)
		}
	}
	if nd.err != nil {
		return nd.err
	}
	for _, err := range errs {
		if err != nil {
			return errStop
		}
	}
	return nil
}

// work is worker w's loop: unit i of the stream is its unit i/n.
func (h *parallelHead[In, Out]) work(ctx context.Context, halt *atomic.Bool, w int) error {
	in, out, s := h.in.rings[w], h.out.rings[w], h.stages[w]
	n := uint64(len(h.stages))
	var st *stats
	if h.nd.stats != nil {
		st = &h.ws[w]
		*st = stats{}
	}
	var t int64
	if st != nil {
		t = now()
	}
	stop := func() error {
		out.close(true)
		return errStop
	}
	for local := uint64(0); ; local++ {
		if halt.Load() {
			return stop()
		}
		v, sp, err := in.get(ctx)
		if err != nil {
			if err == io.EOF {
				out.close(false)
				return nil
			}
			return stop()
		}
		unit := local*n + uint64(w)
		if unit > h.failedAt.Load() {
			in.release()
			return stop() // past a failure: the stream ends before this unit
		}
		if st != nil {
			if in.cwait {
				t1 := now()
				st.waitIn += t1 - t
				t = t1
			}
			st.queued += max(t-sp.sent, 0)
		}
		o, err := s.Process(ctx, v)
		in.release()
		if err != nil {
			if ctx.Err() != nil {
				return stop()
			}
			for cur := h.failedAt.Load(); unit < cur && !h.failedAt.CompareAndSwap(cur, unit); cur = h.failedAt.Load() {
			}
			// Stop the stages upstream; the other workers finish the units
			// before this one, and the merge ends the stream here.
			se := h.nd.pl.failUnit(ctx, h.nd, unit, err, h.nd.seg-1)
			out.close(false)
			return se
		}
		h.units[w]++
		if st != nil {
			t1 := now()
			st.busy += t1 - t
			st.hist.record(t1 - t)
			if h.size != nil {
				st.bytes += uint64(h.size(o))
			}
			t = t1
		}
		if err := out.put(ctx, o, stamp{sp.origin, t}); err != nil {
			return stop()
		}
		if st != nil && out.pwait {
			t1 := now()
			st.waitOut += t1 - t
			t = t1
		}
	}
}
