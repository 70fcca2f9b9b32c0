package nbd

import (
	"context"
	"sync"
	"time"
)

// clientTimeout is the context of a call bounded by WithRequestTimeout:
// what context.WithTimeout(context.Background(), d) gives, made once and
// used again by call after call, so that a bounded ReadAt or WriteAt
// allocates nothing (context.WithTimeout allocates its context and timer,
// and the connection's watches would register a callback with each).
//
// A call arms it (arm), uses it as its context, and disarms it (disarm)
// before it goes back to the client's free list. Its timer runs expire at
// the deadline: Err then reports context.DeadlineExceeded, Done is closed,
// and the reads and writes in progress under it (the connection's
// clientWatch, registered directly, without context.AfterFunc) are cut.
// A Done channel once closed is replaced by the next arm; a callback of the
// timer that comes late, for an earlier call, finds the deadline not yet
// passed and does nothing.
type clientTimeout struct {
	mu      sync.Mutex
	done    chan struct{}
	at      time.Time // the deadline of the call in progress
	armed   bool
	expired bool           // at passed while armed: done is closed
	watches []*clientWatch // reads and writes in progress under it
	timer   *time.Timer    // runs expire
}

func newClientTimeout() *clientTimeout {
	t := &clientTimeout{done: make(chan struct{})}
	t.timer = time.AfterFunc(time.Hour, t.expire)
	t.timer.Stop()
	return t
}

// arm starts a call bounded by d.
func (t *clientTimeout) arm(d time.Duration) {
	t.mu.Lock()
	if t.expired {
		t.done, t.expired = make(chan struct{}), false
	}
	t.at, t.armed = time.Now().Add(d), true
	t.mu.Unlock()
	t.timer.Reset(d)
}

// disarm ends the call; every read and write under it has ended.
func (t *clientTimeout) disarm() {
	t.timer.Stop()
	t.mu.Lock()
	t.armed = false
	t.mu.Unlock()
}

// expire ends the call in progress if its deadline has passed, and cuts
// the reads and writes in progress under it (outside t.mu: a watch takes
// its own lock first, then t.mu, to register).
func (t *clientTimeout) expire() {
	t.mu.Lock()
	if !t.armed || t.expired || time.Now().Before(t.at) {
		t.mu.Unlock()
		return
	}
	t.expired = true
	close(t.done)
	done := t.done
	var buf [2]*clientWatch
	cut := append(buf[:0], t.watches...)
	t.mu.Unlock()
	for _, w := range cut {
		w.fire(done)
	}
}

// watch registers w, whose read or write expire is to cut.
func (t *clientTimeout) watch(w *clientWatch) {
	t.mu.Lock()
	t.watches = append(t.watches, w)
	t.mu.Unlock()
}

// unwatch ends w's registration.
func (t *clientTimeout) unwatch(w *clientWatch) {
	t.mu.Lock()
	for i, x := range t.watches {
		if x == w {
			last := len(t.watches) - 1
			t.watches[i], t.watches[last] = t.watches[last], nil
			t.watches = t.watches[:last]
			break
		}
	}
	t.mu.Unlock()
}

func (t *clientTimeout) Deadline() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at, true
}

func (t *clientTimeout) Done() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

func (t *clientTimeout) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expired {
		return context.DeadlineExceeded
	}
	return nil
}

func (t *clientTimeout) Value(any) any { return nil }

func (t *clientTimeout) String() string { return "nbd.WithRequestTimeout" }

// clientTimeouts is a Client's free list of clientTimeouts: the last one
// given back is the next one taken, so one goroutine calling again and
// again uses the same one. It keeps at most max; a call that finds it
// empty makes one.
type clientTimeouts struct {
	mu   sync.Mutex
	free []*clientTimeout
	max  int
}

// get returns a clientTimeout armed for d.
func (p *clientTimeouts) get(d time.Duration) *clientTimeout {
	p.mu.Lock()
	var t *clientTimeout
	if n := len(p.free); n > 0 {
		t = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	}
	p.mu.Unlock()
	if t == nil {
		t = newClientTimeout()
	}
	t.arm(d)
	return t
}

// put disarms t and keeps it for a later call, if there is room.
func (p *clientTimeouts) put(t *clientTimeout) {
	t.disarm()
	p.mu.Lock()
	if len(p.free) < p.max {
		p.free = append(p.free, t)
	}
	p.mu.Unlock()
}
