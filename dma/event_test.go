package dma

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestEvent: a waiter that has spun parks, a post wakes it, and a post
// already made returns at once; in a synctest bubble, so without sleeps.
// The spin itself is tested in package internal/spin.
func TestEvent(t *testing.T) {
	for _, d := range []time.Duration{-1, 0} {
		synctest.Test(t, func(t *testing.T) {
			ev := newEvent()
			var got atomic.Uint64
			go func() { got.Store(ev.await(0, d)) }()
			synctest.Wait() // the waiter is parked
			if n := got.Load(); n != 0 {
				t.Fatalf("spin %v: await returned %d before a post", d, n)
			}
			ev.post()
			synctest.Wait()
			if n := got.Load(); n != 1 {
				t.Fatalf("spin %v: await returned %d, want 1", d, n)
			}
			ev.post()
			if n := ev.await(1, d); n != 2 {
				t.Fatalf("spin %v: await after a post returned %d, want 2", d, n)
			}
		})
	}
}
