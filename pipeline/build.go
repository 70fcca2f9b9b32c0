package pipeline

import (
	"fmt"
	"sync/atomic"
)

// Line is a pipeline under construction whose last stage produces units of
// type T. From starts one, Then extends it by a stage and To ends it with a
// sink, returning the Pipeline. A Line is extended once: each call returns a
// new Line for the longer pipeline. Build errors (a nil stage, a bad link)
// are kept and returned by To, so a chain of calls needs one check.
//
// A Line is not safe for concurrent use.
type Line[T any] struct {
	b    *builder
	used bool
}

// builder collects the stages of one pipeline.
type builder struct {
	nodes []*node
	elems []elem
	err   error
}

// elem is a node's typed half: build makes the node's runtime form, given
// the runtime form of the node after it, and returns the value that feeds
// the node (a consumer of its input type); a source returns nil.
type elem struct {
	build func(p *Pipeline, next any) (any, error)
	size  any // func(Out) int, or nil
}

// From starts a pipeline with src, the stage named name (stage 0).
func From[T any](name string, src Source[T]) *Line[T] {
	b := &builder{}
	nd := b.add(name, Inline())
	if src == nil {
		b.fail(nd, ErrNil)
	}
	b.elems = append(b.elems, elem{})
	e := &b.elems[len(b.elems)-1]
	e.build = func(p *Pipeline, next any) (any, error) {
		h := &sourceHead[T]{nd: p.nodes[nd], src: src, next: next.(consumer[T])}
		h.size, _ = b.elems[nd].size.(func(T) int)
		p.segs[0].head = h
		return nil, nil
	}
	return &Line[T]{b: b}
}

// Then extends l by stage s, named name, which takes its input from l's
// last stage through link, and returns the longer Line.
func Then[In, Out any](l *Line[In], link Link, name string, s Stage[In, Out]) *Line[Out] {
	b := l.take()
	nd := b.add(name, link)
	if s == nil {
		b.fail(nd, ErrNil)
	}
	b.elems = append(b.elems, elem{build: func(p *Pipeline, next any) (any, error) {
		n := &stageNode[In, Out]{nd: p.nodes[nd], s: s, next: next.(consumer[Out])}
		n.size, _ = b.elems[nd].size.(func(Out) int)
		return entry[In](p, nd, n)
	}})
	return &Line[Out]{b: b}
}

// Size sets how many bytes a unit produced by l's last stage carries (the
// payload the report's rates count). Without it a stage counts units only,
// and the report's rates are in units per second. It returns l. Call it
// before extending l (afterwards it records ErrUsed).
func (l *Line[T]) Size(f func(T) int) *Line[T] {
	switch {
	case l.used:
		if l.b.err == nil {
			l.b.err = fmt.Errorf("Size: %w", ErrUsed)
		}
	case f != nil:
		l.b.elems[len(l.b.elems)-1].size = f
	}
	return l
}

// To ends l with sink, named name, which takes its input from l's last stage
// through link, and returns the pipeline, or the first error made while
// building it. A sink counts the bytes of its input with the last stage's
// Size function.
func (l *Line[T]) To(link Link, name string, sink Sink[T]) (*Pipeline, error) {
	b := l.take()
	nd := b.add(name, link)
	if sink == nil {
		b.fail(nd, ErrNil)
	}
	prevSize := b.elems[len(b.elems)-1].size
	b.elems = append(b.elems, elem{size: prevSize, build: func(p *Pipeline, next any) (any, error) {
		n := &sinkNode[T]{nd: p.nodes[nd], sink: sink, p: p}
		n.size, _ = b.elems[nd].size.(func(T) int)
		return entry[T](p, nd, n)
	}})
	if b.err != nil {
		return nil, b.err
	}
	return b.pipeline()
}

// take marks l used and returns its builder, recording ErrUsed on reuse.
func (l *Line[T]) take() *builder {
	if l.used {
		b := &builder{nodes: l.b.nodes, elems: l.b.elems, err: l.b.err}
		if b.err == nil {
			b.err = ErrUsed
		}
		// A fresh builder, so the reuse cannot corrupt the first branch.
		b.nodes = append([]*node(nil), b.nodes...)
		b.elems = append([]elem(nil), b.elems...)
		return b
	}
	l.used = true
	return l.b
}

func (b *builder) add(name string, link Link) int {
	i := len(b.nodes)
	b.nodes = append(b.nodes, &node{name: name, index: i, link: link})
	return i
}

func (b *builder) fail(i int, err error) {
	if b.err == nil {
		b.err = fmt.Errorf("stage %d %q: %w", i, b.nodes[i].name, err)
	}
}

// entry returns what feeds node nd, whose runtime form is c: c itself when
// the node's link is inline, or the tail of a new link whose head, on a
// goroutine of its own, pushes into c.
func entry[T any](p *Pipeline, nd int, c consumer[T]) (any, error) {
	n := p.nodes[nd]
	if !n.link.Overlapped() {
		return c, nil
	}
	s := n.seg
	lk, err := newLink[T](n.link)
	if err != nil {
		return nil, fmt.Errorf("stage %d %q: %w", nd, n.name, err)
	}
	p.segs[s].head = &linkHead[T]{nd: n, lk: lk, next: c}
	p.segs[s].link = lk
	p.segs[s-1].out = lk
	return &linkTail[T]{nd: p.nodes[nd-1], lk: lk}, nil
}

// pipeline lays out the segments and builds the runtime chain, sink first.
func (b *builder) pipeline() (*Pipeline, error) {
	p := &Pipeline{nodes: b.nodes}
	seg := 0
	for i, n := range p.nodes {
		n.pl = p
		if i > 0 && n.link.Overlapped() {
			seg++
			p.segs[len(p.segs)-1].last = i - 1
		}
		if i == 0 || n.link.Overlapped() {
			p.segs = append(p.segs, &segment{index: seg, first: i})
		}
		n.seg = seg
	}
	p.segs[len(p.segs)-1].last = len(p.nodes) - 1
	var next any
	for i := len(b.elems) - 1; i >= 0; i-- {
		c, err := b.elems[i].build(p, next)
		if err != nil {
			return nil, err
		}
		next = c
	}
	for i := range p.segs {
		p.segs[i].p = p
	}
	return p, nil
}

// Pipeline is a datapath of stages: a source, stages and a sink, each
// connected to the one before it by a Link. Stages joined by inline links
// form a segment that runs on one goroutine; each overlapped link starts a
// new segment on a goroutine of its own. The last segment runs on the
// goroutine that calls Run.
//
// Set the exported fields before Run. A Pipeline may be run again after Run
// returns (its queues are reset, its counters zeroed); it is not safe to
// call Run concurrently (the second call gets ErrRunning).
type Pipeline struct {
	// Instrument turns on timing: each stage's busy time, bytes, queue wait
	// and latency histogram, and the end-to-end latency of every unit.
	// Off, a stage pays one nil check per unit and reads no clock; the
	// report then holds unit counts, states and the wall time only.
	Instrument bool

	// AbortOnError stops every stage at the first error. By default the
	// stages upstream of the failed one stop, and the stages downstream
	// finish the units already queued for them (the units before the failed
	// one), so the sink sees exactly the stream up to the failure.
	AbortOnError bool

	// Cores, when above 0, is how many processors the segments share. The
	// model then bounds the overlapped rate by Cores units per Σ t_i, the
	// stages' whole time for a unit: like
	// model.Cascade.AtDepth, no more than Cores units are worked on at once.
	// 0 gives each segment a processor of its own, like the paper's hardware
	// nodes. Set runtime.GOMAXPROCS(0) for stages that compute; leave 0 for
	// stages that mostly wait (on a network, a disk).
	Cores int

	nodes   []*node
	segs    []*segment
	e2e     *Histogram
	running atomic.Bool
	runState
}

// Len returns the number of stages, source and sink included.
func (p *Pipeline) Len() int { return len(p.nodes) }

// Segments returns the number of goroutines a run uses (one per segment).
func (p *Pipeline) Segments() int { return len(p.segs) }

// String describes the pipeline: stage names joined by their links,
// "gen -> ring(64) -> crc -> sink" (inline links shown as "->" alone).
func (p *Pipeline) String() string {
	s := ""
	for i, n := range p.nodes {
		if i > 0 {
			if n.link.Overlapped() {
				s += " -> " + n.link.String() + " -> "
			} else {
				s += " -> "
			}
		}
		s += n.name
	}
	return s
}
