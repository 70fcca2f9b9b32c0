package pipeline

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
)

// LinkKind says how a stage is connected to the stage before it.
type LinkKind uint8

const (
	// LinkInline runs the stage on the goroutine of the stage before it,
	// one unit at a time: the paper's store-and-forward, synchronous cascade.
	LinkInline LinkKind = iota
	// LinkRing runs the stage on its own goroutine behind a bounded
	// single-producer, single-consumer ring of units.
	LinkRing
)

var linkKindNames = [...]string{"inline", "ring"}

// String returns "inline" or "ring".
func (k LinkKind) String() string {
	if int(k) < len(linkKindNames) {
		return linkKindNames[k]
	}
	return fmt.Sprintf("LinkKind(%d)", uint8(k))
}

// MarshalText returns String's text.
func (k LinkKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Link says how a stage takes its input from the stage before it. The zero
// Link is Inline. Links other than Inline are overlapped: the stages on
// either side run at the same time on different units, each on its own
// goroutine, and the queue between them bounds how far ahead the upstream
// side may run.
type Link struct {
	kind     LinkKind
	capacity int
}

// Inline returns the synchronous link: the stage runs on the upstream
// stage's goroutine, which hands it each unit and waits for it to finish
// before taking the next (store-and-forward).
func Inline() Link { return Link{} }

// Ring returns an overlapped link through the package's own bounded
// single-producer, single-consumer ring of capacity units (rounded up to a
// power of two). It is the fastest link for units of any type.
func Ring(capacity int) Link { return Link{kind: LinkRing, capacity: capacity} }

// Kind returns the link's kind.
func (l Link) Kind() LinkKind { return l.kind }

// Cap returns the link's capacity in units (0 for Inline).
func (l Link) Cap() int { return l.capacity }

// Overlapped reports whether the link puts the stage on its own goroutine.
func (l Link) Overlapped() bool { return l.kind != LinkInline }

// String returns the kind and the capacity: "inline", "ring(64)".
func (l Link) String() string {
	if l.kind == LinkInline {
		return "inline"
	}
	return fmt.Sprintf("%v(%d)", l.kind, l.capacity)
}

// link is the pipeline's side of a queue between two goroutines: it carries
// each unit with the time it entered the pipeline (0 when not instrumented).
// get returns io.EOF once the producer closed the link and the units before
// are drained, or errStop instead when the producer closed it because it
// was stopped (the stream was cut, not ended).
//
// putWaited and getWaited report whether the last put or get had to wait
// (or may have): only then does an instrumented stage read the clock to
// count queue wait, so a link that flows costs no clock reads.
type link[T any] interface {
	sender[T]
	reset()
	get(ctx context.Context) (v T, st stamp, err error)
	getWaited() bool
	release()
}

// sender is the producer's side of a link.
type sender[T any] interface {
	put(ctx context.Context, v T, st stamp) error
	putWaited() bool
	closer
}

// closer ends a link: cut says the producer was stopped.
type closer interface {
	close(cut bool)
}

// cutFlag remembers why a link was closed. It is set before the close, so
// the consumer that sees the close sees it.
type cutFlag struct{ cut atomic.Bool }

// end is the error for a drained, closed link.
func (c *cutFlag) end() error {
	if c.cut.Load() {
		return errStop
	}
	return io.EOF
}

// newLink returns the link l describes for units of type T.
func newLink[T any](l Link) (link[T], error) {
	switch l.kind {
	case LinkRing:
		if l.capacity < 1 {
			return nil, fmt.Errorf("%w: ring capacity %d < 1", ErrLink, l.capacity)
		}
		return newRing[T](l.capacity), nil
	}
	return nil, fmt.Errorf("%w: kind %v", ErrLink, l.kind)
}

// pad keeps the two sides' hot fields on separate cache lines.
type pad [64]byte

// stamp is what travels with a unit through a link when the pipeline is
// instrumented (zeros otherwise): when it entered the pipeline and when it
// was put into the link.
type stamp struct {
	origin, sent int64
}

// item is a unit in a ring or channel, with its stamp.
type item[T any] struct {
	v T
	stamp
}

// A ring side that must wait re-reads the other side's index ringChecks
// times, then yields the processor between re-reads ringYields times, and
// then parks on a channel. Spinning longer (the fifo package spins 20 µs)
// helps when each side has a core of its own; measured on this project's
// two shared cores it lost, stealing the processor from the other stages.
const (
	ringChecks = 64
	ringYields = 8
)

// spinner paces a waiting side: tight checks, a few yields, then park.
type spinner struct{ i int }

// more reports whether to check again rather than park.
func (s *spinner) more() bool {
	s.i++
	switch {
	case s.i < ringChecks:
		return true
	case s.i < ringChecks+ringYields:
		runtime.Gosched()
		return true
	}
	return false
}

// ring is a bounded single-producer, single-consumer ring. Each side keeps
// a cached copy of the other's index and reads the shared one only when the
// cache says full or empty. A side that must wait spins a little, then
// parks on a one-token channel after announcing it in a flag; the other side
// sends a token only when it sees the flag (Go's atomics are sequentially
// consistent, so one of the two always sees the other's store). The
// consumer wakes a parked producer only once the ring is half empty, so a
// slow consumer costs one wake-up per half ring, not one per unit.
type ring[T any] struct {
	cutFlag
	_    pad
	tail atomic.Uint64 // next slot to fill; written by the producer
	_    pad
	head atomic.Uint64 // next slot to drain; written by the consumer
	_    pad
	// producer's fields
	ptail, pcache uint64 // its tail, and the head it last read
	pwait         bool   // the last put waited
	_             pad
	// consumer's fields
	chead, ccache uint64 // its head, and the tail it last read
	cwait         bool   // the last get waited
	_             pad
	closed        atomic.Bool
	prodWaiting   atomic.Bool
	consWaiting   atomic.Bool
	notFull       chan struct{}
	notEmpty      chan struct{}
	size, mask    uint64
	slots         []item[T]
}

func newRing[T any](capacity int) *ring[T] {
	n := uint64(1)
	for n < uint64(capacity) {
		n <<= 1
	}
	return &ring[T]{
		size:     n,
		mask:     n - 1,
		slots:    make([]item[T], n),
		notFull:  make(chan struct{}, 1),
		notEmpty: make(chan struct{}, 1),
	}
}

func (r *ring[T]) reset() {
	clear(r.slots)
	r.tail.Store(0)
	r.head.Store(0)
	r.ptail, r.pcache, r.chead, r.ccache = 0, 0, 0, 0
	r.closed.Store(false)
	r.cut.Store(false)
	r.prodWaiting.Store(false)
	r.consWaiting.Store(false)
	select {
	case <-r.notFull:
	default:
	}
	select {
	case <-r.notEmpty:
	default:
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (r *ring[T]) putWaited() bool { return r.pwait }
func (r *ring[T]) getWaited() bool { return r.cwait }

func (r *ring[T]) put(ctx context.Context, v T, st stamp) error {
	r.pwait = false
	for r.ptail-r.pcache >= r.size {
		r.pcache = r.head.Load()
		if r.ptail-r.pcache < r.size {
			break
		}
		r.pwait = true
		for sp := (spinner{}); r.ptail-r.head.Load() >= r.size && sp.more(); {
		}
		r.prodWaiting.Store(true)
		if r.ptail-r.head.Load() < r.size {
			r.prodWaiting.Store(false)
			continue
		}
		select {
		case <-r.notFull:
		case <-ctx.Done():
			r.prodWaiting.Store(false)
			return context.Cause(ctx)
		}
		r.prodWaiting.Store(false)
	}
	s := &r.slots[r.ptail&r.mask]
	s.v, s.stamp = v, st
	r.ptail++
	r.tail.Store(r.ptail)
	if r.consWaiting.Load() {
		signal(r.notEmpty)
	}
	return nil
}

func (r *ring[T]) close(cut bool) {
	r.cut.Store(cut)
	r.closed.Store(true)
	if r.consWaiting.Load() {
		signal(r.notEmpty)
	}
}

func (r *ring[T]) get(ctx context.Context) (T, stamp, error) {
	r.cwait = false
	for r.chead == r.ccache {
		r.ccache = r.tail.Load()
		if r.chead != r.ccache {
			break
		}
		r.cwait = true
		if r.closed.Load() {
			r.ccache = r.tail.Load() // units put before close
			if r.chead != r.ccache {
				break
			}
			var zero T
			return zero, stamp{}, r.end()
		}
		for sp := (spinner{}); r.tail.Load() == r.chead && !r.closed.Load() && sp.more(); {
		}
		r.consWaiting.Store(true)
		if r.tail.Load() != r.chead || r.closed.Load() {
			r.consWaiting.Store(false)
			continue
		}
		select {
		case <-r.notEmpty:
		case <-ctx.Done():
			r.consWaiting.Store(false)
			var zero T
			return zero, stamp{}, context.Cause(ctx)
		}
		r.consWaiting.Store(false)
	}
	s := &r.slots[r.chead&r.mask]
	return s.v, s.stamp, nil
}

func (r *ring[T]) release() {
	s := &r.slots[r.chead&r.mask]
	var zero T
	s.v = zero // the ring must not keep the unit alive
	r.chead++
	r.head.Store(r.chead)
	if r.prodWaiting.Load() && r.ptailSnapshot()-r.chead <= r.size/2 {
		signal(r.notFull)
	}
}

// ptailSnapshot is the producer's published tail, read by the consumer.
func (r *ring[T]) ptailSnapshot() uint64 { return r.tail.Load() }
