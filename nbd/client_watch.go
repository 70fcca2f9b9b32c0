package nbd

import (
	"context"
	"sync"
)

// clientWatch cuts a connection's blocking read (or write) when the
// context of the caller making it ends, as context.AfterFunc does, and
// keeps its registration from one read to the next while the callers'
// contexts share a Done channel: one context for every call of a session,
// or values derived from it with context.WithValue. A registration
// allocates and takes the context's lock (contended when many goroutines
// share the context), and one per request made a request with a
// cancellable context dearer than one with context.Background
// (BenchmarkCallContexts).
//
// A registration is kept only from the second read in a row under the
// same Done channel on: a context made for one call (a caller's
// context.WithTimeout per request) is dropped when its read ends, as it
// must be, since a registration still there when the call cancels its
// context would start a goroutine to run its callback. WithRequestTimeout's
// contexts (clientTimeout) are registered with directly, without
// allocating, and dropped with each read.
//
// A registration cuts only while a read of a caller with its Done channel
// is in progress (between begin and end), so a context that ends later,
// when another caller's read is in progress, cuts nothing. The watch is
// used by one goroutine at a time (the leader, or the writer); its mutex
// orders that goroutine with the registration's callback and with close.
type clientWatch struct {
	mu     sync.Mutex
	done   <-chan struct{} // the Done channel of the context registered
	stop   func() bool     // its registration's (context.AfterFunc)
	tm     *clientTimeout  // or the WithRequestTimeout context it is registered with
	kept   bool            // the registration outlives its read
	last   <-chan struct{} // the Done channel of the last read's context
	armed  bool            // a read under done is in progress
	cut    bool            // and was cut
	closed bool            // the connection is gone: register nothing more
	kick   func()          // cuts the read in progress (under mu)
}

// begin arms the watch for a read on behalf of ctx and reports whether it
// did (not for a context that never ends, nor on a closed connection).
// The caller checks ctx.Err() after begin and before each read.
func (w *clientWatch) begin(ctx context.Context) bool {
	d := ctx.Done()
	if d == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if d != w.done {
		w.drop()
		if t, ok := ctx.(*clientTimeout); ok {
			// One per call, used again by later calls: registered
			// without allocating, and never kept past the read.
			t.watch(w)
			w.done, w.tm = d, t
		} else {
			// The callback runs on a goroutine of its own, even for a
			// context that has already ended, so registering under mu
			// is safe.
			w.done, w.stop = d, context.AfterFunc(ctx, func() { w.fire(d) })
			w.kept = d == w.last
		}
	}
	w.last = d
	w.armed, w.cut = true, false
	return true
}

// drop ends the registration, if there is one. Call with mu held.
func (w *clientWatch) drop() {
	if w.stop != nil {
		w.stop()
	}
	if w.tm != nil {
		w.tm.unwatch(w)
	}
	w.done, w.stop, w.tm, w.kept = nil, nil, nil, false
}

// fire is the callback of the registration for done.
func (w *clientWatch) fire(done <-chan struct{}) {
	w.mu.Lock()
	if w.armed && w.done == done {
		w.cut = true
		w.kick()
	}
	w.mu.Unlock()
}

// end disarms the watch after begin returned true and reports whether it
// cut the read meanwhile; no cut of this watch comes after end.
func (w *clientWatch) end() (cut bool) {
	w.mu.Lock()
	cut = w.cut
	w.armed, w.cut = false, false
	if !w.kept {
		w.drop()
	}
	w.mu.Unlock()
	return cut
}

// close drops the registration, so that a context that outlives the
// connection does not keep it reachable, and registers nothing more.
func (w *clientWatch) close() {
	w.mu.Lock()
	w.drop()
	w.closed = true
	w.mu.Unlock()
}
