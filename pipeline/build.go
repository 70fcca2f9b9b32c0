package pipeline

import (
	"fmt"
	"sync/atomic"
)

// Line is a pipeline under construction whose last stage produces units of
// type T. From starts one, Then extends it by a stage and To ends it with a
// sink, returning the Pipeline. A Line is extended once: each call returns a
// new Line for the longer pipeline. Build errors (a nil stage, a Line
// extended twice) are kept and returned by To, so a chain of calls needs
// one check.
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
// the runtime form of the node after it, and returns the consumer of the
// node's input (nil for the source, which it installs as the head).
type elem struct {
	build func(p *Pipeline, next any) any
	size  any // func(Out) int, or nil
}

// From starts a pipeline with src, the stage named name (stage 0).
func From[T any](name string, src Source[T]) *Line[T] {
	b := &builder{}
	nd := b.add(name)
	if src == nil {
		b.fail(nd, ErrNil)
	}
	b.elems = append(b.elems, elem{build: func(p *Pipeline, next any) any {
		h := &sourceHead[T]{nd: p.nodes[nd], src: src, next: next.(consumer[T])}
		h.size, _ = b.elems[nd].size.(func(T) int)
		p.head = h
		return nil
	}})
	return &Line[T]{b: b}
}

// Then extends l by stage s, named name, which takes each unit l's last
// stage produces, and returns the longer Line.
func Then[In, Out any](l *Line[In], name string, s Stage[In, Out]) *Line[Out] {
	b := l.take()
	nd := b.add(name)
	if s == nil {
		b.fail(nd, ErrNil)
	}
	b.elems = append(b.elems, elem{build: func(p *Pipeline, next any) any {
		n := &stageNode[In, Out]{nd: p.nodes[nd], s: s, next: next.(consumer[Out])}
		n.size, _ = b.elems[nd].size.(func(Out) int)
		return n
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

// To ends l with sink, named name, which takes each unit l's last stage
// produces, and returns the pipeline, or the first error made while
// building it. A sink counts the bytes of its input with the last stage's
// Size function.
func (l *Line[T]) To(name string, sink Sink[T]) (*Pipeline, error) {
	b := l.take()
	nd := b.add(name)
	if sink == nil {
		b.fail(nd, ErrNil)
	}
	prevSize := b.elems[len(b.elems)-1].size
	b.elems = append(b.elems, elem{size: prevSize, build: func(p *Pipeline, next any) any {
		n := &sinkNode[T]{nd: p.nodes[nd], sink: sink, p: p}
		n.size, _ = b.elems[nd].size.(func(T) int)
		return n
	}})
	if b.err != nil {
		return nil, b.err
	}
	p := &Pipeline{nodes: b.nodes}
	var next any
	for i := len(b.elems) - 1; i >= 0; i-- {
		next = b.elems[i].build(p, next)
	}
	for _, n := range p.nodes {
		n.pl = p
	}
	return p, nil
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

func (b *builder) add(name string) int {
	i := len(b.nodes)
	b.nodes = append(b.nodes, &node{name: name, index: i})
	return i
}

func (b *builder) fail(i int, err error) {
	if b.err == nil {
		b.err = fmt.Errorf("stage %d %q: %w", i, b.nodes[i].name, err)
	}
}

// Pipeline is a datapath of stages: a source, stages and a sink, run one
// unit at a time on the goroutine that calls Run, each stage handing its
// unit to the next and waiting for it (the paper's synchronous cascade:
// the model adds their times, formula 1).
//
// Set Instrument before Run. A Pipeline may be run again after Run
// returns (its counters zeroed); it is not safe to call Run concurrently
// (the second call gets ErrRunning).
type Pipeline struct {
	// Instrument turns on timing: each stage's busy time, bytes and
	// latency histogram, and the end-to-end latency of every unit. Off, a
	// stage pays one nil check per unit and reads no clock; the report
	// then holds unit counts, states and the wall time only.
	Instrument bool

	nodes   []*node
	head    runner
	e2e     *Histogram
	running atomic.Bool
}

// Len returns the number of stages, source and sink included.
func (p *Pipeline) Len() int { return len(p.nodes) }

// String describes the pipeline: its stages' names joined by arrows,
// "host -> bridge -> verify".
func (p *Pipeline) String() string {
	s := ""
	for i, n := range p.nodes {
		if i > 0 {
			s += " -> "
		}
		s += n.name
	}
	return s
}
