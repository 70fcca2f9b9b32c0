package dma

import (
	"runtime"
	"sync/atomic"
	"time"
)

// event is a counter one goroutine posts and one other goroutine awaits.
// The waiter spins (the other side usually answers within a transfer's
// time), then parks on a channel; post wakes it only when it is parked, so
// an event between two busy goroutines costs two atomic operations.
type event struct {
	n      atomic.Uint64 // posts so far
	parked atomic.Uint32 // 1 while the waiter is parked or about to park
	ch     chan struct{}
}

func newEvent() event { return event{ch: make(chan struct{}, 1)} }

func (e *event) post() {
	e.n.Add(1)
	if e.parked.Load() != 0 && e.parked.CompareAndSwap(1, 0) {
		select {
		case e.ch <- struct{}{}:
		default:
		}
	}
}

// await waits until more than seen posts have happened and returns the
// count. It spins for about spin, yielding the processor now and then,
// before it parks; with a negative spin it parks at once.
func (e *event) await(seen uint64, spin time.Duration) uint64 {
	if spin < 0 {
		for {
			if n := e.n.Load(); n > seen {
				return n
			}
			e.parked.Store(1)
			if n := e.n.Load(); n > seen {
				e.parked.Store(0)
				return n
			}
			<-e.ch
		}
	}
	var deadline time.Time
	for i := 0; ; i++ {
		if n := e.n.Load(); n > seen {
			return n
		}
		if i < 64 {
			continue
		}
		if i&63 == 0 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spin)
			} else if now.After(deadline) {
				e.parked.Store(1)
				if n := e.n.Load(); n > seen {
					e.parked.Store(0)
					return n
				}
				<-e.ch
				deadline = time.Time{}
				i = 0
				continue
			}
		}
		runtime.Gosched()
	}
}
