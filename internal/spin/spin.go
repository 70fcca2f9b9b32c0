package spin

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Checks is how many times a waiting side re-checks the other side's state
// before it starts yielding the processor. On a machine with a core per
// side the other side usually answers within these checks, which is far
// cheaper than a goroutine wake-up.
const Checks = 64

// YieldsPerClock is how many times a spinning side yields the processor
// between two reads of the clock.
const YieldsPerClock = 8

// FIFO is the default spin of package fifo (fifo.DefaultSpin): about what
// parking and waking a goroutine costs, so a wait costs at most about twice
// the best choice when each side has a core. Longer spins pay on idle cores
// and hurt on a machine whose cores are busy with other work.
const FIFO = 5 * time.Microsecond

// Engine is the default spin of package dma (dma.DefaultSpin), shorter
// than FIFO: it covers the hand-offs inside back-to-back in-memory
// transfers, yet does not hold a core for long while a goroutine elsewhere
// in the program (an NBD request, its reply reader) needs it.
const Engine = 2 * time.Microsecond

// Pacer paces a waiting side: Checks tight re-checks, then re-checks with a
// yield of the processor before each, until the spin duration has passed,
// then park. The zero Pacer spins for one round of YieldsPerClock yields.
//
// A Pacer is used by one goroutine; it does not allocate.
type Pacer struct {
	i        int
	spin     time.Duration
	deadline time.Time
}

// NewPacer returns a Pacer for a spin of d: after the tight checks it
// yields until d has passed (d > 0), yields one round of YieldsPerClock
// times (d == 0), or parks at once (d < 0).
func NewPacer(d time.Duration) Pacer { return Pacer{spin: d} }

// More reports whether to re-check the other side once more rather than
// park. Past the tight checks it yields the processor before it returns
// true.
func (p *Pacer) More() bool {
	p.i++
	if p.i < Checks {
		return true
	}
	if p.spin < 0 {
		return false
	}
	if n := p.i - Checks; n%YieldsPerClock == 0 {
		if p.spin == 0 {
			if n > 0 {
				return false
			}
		} else {
			now := time.Now()
			if n == 0 {
				p.deadline = now.Add(p.spin)
			} else if now.After(p.deadline) {
				return false
			}
		}
	}
	runtime.Gosched()
	return true
}

// Reset starts a new spin, after a wake-up.
func (p *Pacer) Reset() { p.i, p.deadline = 0, time.Time{} }

// Gate parks one waiter until a counter that another goroutine publishes
// reaches a value. The counter is the caller's (a FIFO's head, an event's
// post count): it must only grow, and Wake is called after each store to it
// with the stored value.
//
// Concurrency: one goroutine at a time parks (Park); any goroutine may call
// Wake and Kick. A Gate must be made with NewGate.
type Gate struct {
	want atomic.Uint64 // the count the parked waiter needs; 0: none parked
	ch   chan struct{}
	// fence, on a gate of NewPublishGate, ends the first part of a park
	// after FenceAfter (publish.go); nil on other gates.
	fence *time.Timer
}

// NewGate returns a Gate with no waiter.
func NewGate() Gate { return Gate{ch: make(chan struct{}, 1)} }

// Park announces that the waiter needs the counter to reach want (want >
// 0), then calls ready once: if ready reports true (the counter has reached
// want, or whatever else the waiter waits for has happened), Park returns
// true at once, else it blocks until Wake sees want reached, Kick, or done
// is closed (a nil done never is). Announcing before re-checking means a
// Wake racing with Park is never lost: either ready sees the other side's
// store or the other side's Wake sees the announcement.
//
// Park returns false if done was closed first. A wake-up may be spurious (a
// token left by a Wake that raced with an earlier Park): the caller
// re-checks its condition and may park again.
func (g *Gate) Park(want uint64, ready func() bool, done <-chan struct{}) bool {
	g.want.Store(want)
	if ready() {
		g.want.Store(0)
		return true
	}
	if g.fence != nil {
		return g.parkFenced(ready, done)
	}
	return g.block(done)
}

// block waits for a token or for done.
func (g *Gate) block(done <-chan struct{}) bool {
	select {
	case <-g.ch:
		return true
	case <-done:
		g.want.Store(0)
		return false
	}
}

// parkFenced is the rest of Park on a gate of NewPublishGate, whose
// counter is published with a plain store: a Wake can miss the
// announcement while the re-check misses the store (publish.go). If no
// token comes within FenceAfter, it makes every thread of the process
// pass a memory barrier, after which the store, if there was one, is seen
// (or the publisher sees the announcement and its Wake sends a token), and
// re-checks before it waits for good.
func (g *Gate) parkFenced(ready func() bool, done <-chan struct{}) bool {
	g.fence.Reset(FenceAfter)
	select {
	case <-g.ch:
		g.fence.Stop()
		return true
	case <-done:
		g.fence.Stop()
		g.want.Store(0)
		return false
	case <-g.fence.C:
	}
	heavyBarrier()
	if ready() {
		g.want.Store(0)
		return true
	}
	return g.block(done)
}

// Wake tells the gate the counter is now have: it wakes the parked waiter if
// there is one and have reaches what it needs. With no waiter parked it
// costs one atomic load.
func (g *Gate) Wake(have uint64) {
	if w := g.want.Load(); w != 0 && have >= w && g.want.CompareAndSwap(w, 0) {
		g.signal()
	}
}

// Kick wakes the parked waiter whatever it needs, for an event outside the
// counter (a close). The waiter's ready function must see that event, so a
// Kick racing with Park is not lost.
func (g *Gate) Kick() {
	if g.want.Load() != 0 && g.want.Swap(0) != 0 {
		g.signal()
	}
}

// Reset forgets the waiter and any wake-up left unconsumed. No goroutine
// may be in Park.
func (g *Gate) Reset() {
	g.want.Store(0)
	select {
	case <-g.ch:
	default:
	}
}

func (g *Gate) signal() {
	select {
	case g.ch <- struct{}{}:
	default:
	}
}

// Event is a counter that one goroutine posts and one other goroutine
// awaits. Everything the poster wrote before Post is visible to the waiter
// once Await returns a count that includes that post. Between two busy
// goroutines an event costs two atomic operations per post: Post wakes the
// waiter only when it is parked.
//
// An Event must be made with NewEvent. One goroutine at a time awaits.
type Event struct {
	n atomic.Uint64 // posts so far
	g Gate
}

// NewEvent returns an Event with no posts.
func NewEvent() Event { return Event{g: NewGate()} }

// Post adds one to the count and wakes the waiter if it is parked.
func (e *Event) Post() { e.g.Wake(e.n.Add(1)) }

// Count returns the posts so far.
func (e *Event) Count() uint64 { return e.n.Load() }

// Await waits until more than seen posts have happened and returns the
// count. It spins as a Pacer of spin d does, then parks until a Post.
func (e *Event) Await(seen uint64, d time.Duration) uint64 {
	if n := e.n.Load(); n > seen {
		return n
	}
	p := NewPacer(d)
	ready := func() bool { return e.n.Load() > seen }
	for {
		if n := e.n.Load(); n > seen {
			return n
		}
		if p.More() {
			continue
		}
		e.g.Park(seen+1, ready, nil)
		p.Reset()
	}
}
