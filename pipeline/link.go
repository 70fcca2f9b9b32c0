package pipeline

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/nhdkit/nhd/fifo"
	"github.com/nhdkit/nhd/internal/spin"
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
	// LinkChan runs the stage on its own goroutine behind a buffered channel.
	LinkChan
	// LinkQueue runs the stage on its own goroutine behind a caller's Queue.
	LinkQueue
	// LinkFIFO runs the stage on its own goroutine behind a sector FIFO
	// (package fifo); units are []byte of exactly one block, copied into the
	// FIFO by the upstream goroutine and handed on in place.
	LinkFIFO
	// LinkParallel runs the stage on several goroutines at once, each behind
	// a ring of its own (see Parallel).
	LinkParallel
)

var linkKindNames = [...]string{"inline", "ring", "chan", "queue", "fifo", "parallel"}

// String returns "inline", "ring", "chan", "queue", "fifo" or "parallel".
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
	workers  int // Parallel's goroutines
	queue    any // a Queue[T] or a *fifo.FIFO
}

// Inline returns the synchronous link: the stage runs on the upstream
// stage's goroutine, which hands it each unit and waits for it to finish
// before taking the next (store-and-forward).
func Inline() Link { return Link{} }

// Ring returns an overlapped link through the package's own bounded
// single-producer, single-consumer ring of capacity units (rounded up to a
// power of two). It is the fastest link for units of any type.
func Ring(capacity int) Link { return Link{kind: LinkRing, capacity: capacity} }

// Chan returns an overlapped link through a Go channel of capacity units.
func Chan(capacity int) Link { return Link{kind: LinkChan, capacity: capacity} }

// Through returns an overlapped link through q, which must carry the
// upstream stage's unit type exactly (checked when the pipeline is built).
func Through[T any](q Queue[T]) Link {
	l := Link{kind: LinkQueue, queue: q}
	if q != nil {
		l.capacity = q.Cap()
	}
	return l
}

// FIFO returns an overlapped link through f for units of type []byte that
// are exactly f.BlockSize() long (sectors). The upstream goroutine copies
// each unit into a reserved block and commits it; the downstream goroutine
// peeks blocks in batches and hands each on in place, releasing the batch
// when every unit in it has been through the stages inline after the link:
// a unit must be copied before it crosses a Ring or Chan link (a FIFO link
// copies).
// The pipeline owns f while it runs and Resets it at the start of every
// run; f must serve no other pipeline.
func FIFO(f *fifo.FIFO) Link {
	l := Link{kind: LinkFIFO, queue: f}
	if f != nil {
		l.capacity = f.Cap()
	}
	return l
}

// Kind returns the link's kind.
func (l Link) Kind() LinkKind { return l.kind }

// Cap returns the link's capacity in units (0 for Inline).
func (l Link) Cap() int { return l.capacity }

// Overlapped reports whether the link puts the stage on its own goroutine.
func (l Link) Overlapped() bool { return l.kind != LinkInline }

// Workers returns how many goroutines run the stage: Parallel's workers,
// otherwise 1.
func (l Link) Workers() int { return max(l.workers, 1) }

// String returns the kind and the capacity, "inline", "ring(64)", or
// "parallel(4x8)" for 4 workers behind rings of 8.
func (l Link) String() string {
	switch l.kind {
	case LinkInline:
		return "inline"
	case LinkParallel:
		return fmt.Sprintf("parallel(%dx%d)", l.workers, l.capacity)
	}
	return fmt.Sprintf("%v(%d)", l.kind, l.capacity)
}

// Queue is a bounded FIFO queue of units between one producer goroutine
// and one consumer goroutine, for links the package does not provide.
//
// Put blocks while the queue is full; Get blocks while it is empty and
// returns io.EOF once the queue is closed and drained. Both return promptly
// with ctx's error once ctx is done. Release tells the queue the consumer is
// finished with the unit the last Get returned (a queue that lends memory
// may reuse it then). Close is called by the producer after its last Put.
// Reset empties and reopens the queue; the pipeline calls it before each
// run, with neither side active. Cap is the capacity in units and must not
// change. The queue must give the happens-before edges a channel does: a Get
// follows the Put of its unit, and the Put that fills the slot of unit i
// follows the Get of unit i-Cap().
type Queue[T any] interface {
	Put(ctx context.Context, v T) error
	Get(ctx context.Context) (T, error)
	Release()
	Close()
	Reset()
	Cap() int
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
	case LinkChan:
		if l.capacity < 1 {
			return nil, fmt.Errorf("%w: chan capacity %d < 1", ErrLink, l.capacity)
		}
		return &chanLink[T]{capacity: l.capacity}, nil
	case LinkQueue:
		if l.queue == nil {
			return nil, fmt.Errorf("%w: nil queue", ErrLink)
		}
		q, ok := l.queue.(Queue[T])
		if !ok {
			var zero T
			return nil, fmt.Errorf("%w: queue %T does not carry %T", ErrLink, l.queue, zero)
		}
		if q.Cap() < 1 {
			return nil, fmt.Errorf("%w: queue capacity %d < 1", ErrLink, q.Cap())
		}
		return &queueLink[T]{q: q, stamps: make([]stamp, q.Cap()+2)}, nil
	case LinkFIFO:
		f, _ := l.queue.(*fifo.FIFO)
		if f == nil {
			return nil, fmt.Errorf("%w: nil FIFO", ErrLink)
		}
		var zero T
		if _, ok := any(zero).([]byte); !ok {
			return nil, fmt.Errorf("%w: a FIFO carries []byte, not %T", ErrLink, zero)
		}
		var fl any = newFIFOLink(f)
		return fl.(link[T]), nil
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

// ringSpin is how long a ring side that must wait spins before it parks:
// 0 is one round of yields after the tight checks (package internal/spin).
// Spinning longer helps when each side has a core of its own; on two
// shared cores it steals the processor from the other stages. The ring
// benchmarks (BenchmarkUnit/ring, BenchmarkModel) measure it.
const ringSpin = 0

// ring is a bounded single-producer, single-consumer ring. Each side keeps
// a cached copy of the other's index and reads the shared one only when the
// cache says full or empty. A side that must wait spins a little, then
// parks on a spin.Gate until the other side's index reaches what it needs.
// The producer parks until the ring is half empty, so a slow consumer costs
// one wake-up per half ring, not one per unit.
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
	notFull       spin.Gate // the producer waits on the head
	notEmpty      spin.Gate // the consumer waits on the tail
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
		notFull:  spin.NewGate(),
		notEmpty: spin.NewGate(),
	}
}

func (r *ring[T]) reset() {
	clear(r.slots)
	r.tail.Store(0)
	r.head.Store(0)
	r.ptail, r.pcache, r.chead, r.ccache = 0, 0, 0, 0
	r.closed.Store(false)
	r.cut.Store(false)
	r.notFull.Reset()
	r.notEmpty.Reset()
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
		room := func() bool { return r.ptail-r.head.Load() < r.size }
		for sp := spin.NewPacer(ringSpin); !room() && sp.More(); {
		}
		if !r.notFull.Park(r.ptail-r.size/2, room, ctx.Done()) {
			return context.Cause(ctx)
		}
	}
	s := &r.slots[r.ptail&r.mask]
	s.v, s.stamp = v, st
	r.ptail++
	r.tail.Store(r.ptail)
	r.notEmpty.Wake(r.ptail)
	return nil
}

func (r *ring[T]) close(cut bool) {
	r.cut.Store(cut)
	r.closed.Store(true)
	r.notEmpty.Kick()
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
		ready := func() bool { return r.tail.Load() != r.chead || r.closed.Load() }
		for sp := spin.NewPacer(ringSpin); !ready() && sp.More(); {
		}
		if !r.notEmpty.Park(r.chead+1, ready, ctx.Done()) {
			var zero T
			return zero, stamp{}, context.Cause(ctx)
		}
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
	r.notFull.Wake(r.chead)
}

// chanLink is a link through a buffered channel.
type chanLink[T any] struct {
	cutFlag
	pwait, cwait bool
	capacity     int
	ch           chan item[T]
}

func (c *chanLink[T]) reset() {
	c.ch = make(chan item[T], c.capacity)
	c.cut.Store(false)
}

// put and get try the channel alone first: a select of one case and a
// default is much cheaper than one that also watches ctx.
func (c *chanLink[T]) putWaited() bool { return c.pwait }
func (c *chanLink[T]) getWaited() bool { return c.cwait }

func (c *chanLink[T]) put(ctx context.Context, v T, st stamp) error {
	c.pwait = false
	select {
	case c.ch <- item[T]{v, st}:
		return nil
	default:
	}
	c.pwait = true
	select {
	case c.ch <- item[T]{v, st}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (c *chanLink[T]) get(ctx context.Context) (T, stamp, error) {
	var (
		it item[T]
		ok bool
	)
	c.cwait = false
	select {
	case it, ok = <-c.ch:
	default:
		c.cwait = true
		select {
		case it, ok = <-c.ch:
		case <-ctx.Done():
			return it.v, stamp{}, context.Cause(ctx)
		}
	}
	if !ok {
		return it.v, stamp{}, c.end()
	}
	return it.v, it.stamp, nil
}

func (c *chanLink[T]) release() {}
func (c *chanLink[T]) close(cut bool) {
	c.cut.Store(cut)
	close(c.ch)
}

// queueLink is a link through a caller's Queue. Entry times travel in a side
// ring of Cap()+2 slots: the producer writes slot p before it puts unit p,
// which it can only do after the consumer took unit p-Cap()-1, and the
// consumer reads the time of unit p-Cap()-2 before it takes unit
// p-Cap()-1, so the two never touch a slot at the same time.
type queueLink[T any] struct {
	cutFlag
	q          Queue[T]
	stamps     []stamp
	pseq, cseq uint64
}

func (l *queueLink[T]) reset() {
	l.q.Reset()
	l.cut.Store(false)
	l.pseq, l.cseq = 0, 0
}

func (l *queueLink[T]) put(ctx context.Context, v T, st stamp) error {
	l.stamps[l.pseq%uint64(len(l.stamps))] = st
	if err := l.q.Put(ctx, v); err != nil {
		return err
	}
	l.pseq++
	return nil
}

func (l *queueLink[T]) get(ctx context.Context) (T, stamp, error) {
	v, err := l.q.Get(ctx)
	if err == io.EOF {
		return v, stamp{}, l.end()
	}
	if err != nil {
		return v, stamp{}, err
	}
	st := l.stamps[l.cseq%uint64(len(l.stamps))]
	l.cseq++
	return v, st, nil
}

func (l *queueLink[T]) release()        { l.q.Release() }
func (l *queueLink[T]) putWaited() bool { return true } // the Queue does not say
func (l *queueLink[T]) getWaited() bool { return true }
func (l *queueLink[T]) close(cut bool) {
	l.cut.Store(cut)
	l.q.Close()
}

// fifoBatch is how many blocks a FIFO link's consumer peeks at once.
const fifoBatch = 64

// fifoLink is a link through a sector FIFO. Entry times travel in a side
// array indexed like the FIFO's blocks: the producer writes a block's time
// before committing it and the consumer reads it before releasing it, so
// the FIFO's own hand-off orders every access.
type fifoLink struct {
	cutFlag
	f      *fifo.FIFO
	bs     int
	stamps []stamp
	pseq   uint64
	cseq   uint64
	batch  []byte // blocks peeked and not yet released
	off    int    // bytes of batch already handed on
	done   int    // bytes of batch handed on and released by the pipeline
}

func newFIFOLink(f *fifo.FIFO) *fifoLink {
	return &fifoLink{f: f, bs: f.BlockSize(), stamps: make([]stamp, f.Cap())}
}

func (l *fifoLink) reset() {
	l.f.Reset()
	l.cut.Store(false)
	l.pseq, l.cseq = 0, 0
	l.batch, l.off, l.done = nil, 0, 0
}

func (l *fifoLink) put(ctx context.Context, v []byte, st stamp) error {
	if len(v) != l.bs {
		return fmt.Errorf("%w: %d bytes, block is %d", ErrUnitSize, len(v), l.bs)
	}
	b, err := l.f.Reserve(ctx)
	if err != nil {
		return err
	}
	copy(b, v)
	l.stamps[l.pseq%uint64(len(l.stamps))] = st
	if err := l.f.Commit(1); err != nil {
		return err
	}
	l.pseq++
	return nil
}

func (l *fifoLink) get(ctx context.Context) ([]byte, stamp, error) {
	if l.off == len(l.batch) {
		if l.done > 0 {
			if err := l.f.Release(l.done / l.bs); err != nil {
				return nil, stamp{}, err
			}
		}
		l.batch, l.off, l.done = nil, 0, 0
		// Take what is there without waiting for a full batch: a source
		// may wait for the sink before it produces more.
		b, err := l.f.TryPeekN(fifoBatch)
		if err == fifo.ErrEmpty {
			b, err = l.f.PeekN(ctx, 1)
		}
		if err == io.EOF {
			return nil, stamp{}, l.end()
		}
		if err != nil {
			return nil, stamp{}, err
		}
		l.batch = b
	}
	v := l.batch[l.off : l.off+l.bs : l.off+l.bs]
	l.off += l.bs
	st := l.stamps[l.cseq%uint64(len(l.stamps))]
	l.cseq++
	return v, st, nil
}

func (l *fifoLink) release()        { l.done += l.bs }
func (l *fifoLink) putWaited() bool { return true } // the FIFO does not say
func (l *fifoLink) getWaited() bool { return true }
func (l *fifoLink) close(cut bool) {
	l.cut.Store(cut)
	l.f.Close()
}
