package pipeline

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// ringMachine checks the ring against a slice, from one goroutine: a put on
// a full ring and a get on an empty one are made with a cancelled context,
// so they return its error instead of waiting.
type ringMachine struct {
	r      *ring[int]
	size   int
	queue  []int
	held   bool // a unit got and not released
	closed bool
	next   int
}

func (m *ringMachine) Put(t *rapid.T) {
	if m.closed {
		t.Skip("the producer does not put after close")
	}
	ctx := context.Background()
	full := len(m.queue) == m.size
	if full {
		ctx = canceledCtx()
	}
	err := m.r.put(ctx, m.next, stamp{int64(m.next) * 3, int64(m.next)})
	if full {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("put on a full ring: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	m.queue = append(m.queue, m.next)
	m.next++
}

func (m *ringMachine) Get(t *rapid.T) {
	if m.held {
		t.Skip("the consumer releases before its next get")
	}
	ctx := context.Background()
	if len(m.queue) == 0 && !m.closed {
		ctx = canceledCtx()
	}
	v, sp, err := m.r.get(ctx)
	switch {
	case len(m.queue) > 0:
		if err != nil || v != m.queue[0] || sp != (stamp{int64(v) * 3, int64(v)}) {
			t.Fatalf("get: %d, %v, %v; want %d", v, sp, err, m.queue[0])
		}
		m.held = true
	case m.closed:
		if err != io.EOF {
			t.Fatalf("get on a closed, empty ring: %v", err)
		}
	default:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("get on an empty ring: %v", err)
		}
	}
}

func (m *ringMachine) Release(t *rapid.T) {
	if !m.held {
		t.Skip("nothing to release")
	}
	m.r.release()
	m.queue = m.queue[1:]
	m.held = false
}

func (m *ringMachine) Close(t *rapid.T) {
	m.r.close(false)
	m.closed = true
}

func (m *ringMachine) Reset(t *rapid.T) {
	if !rapid.Bool().Draw(t, "reset") { // rarely
		t.Skip()
	}
	m.r.reset()
	m.queue, m.held, m.closed = nil, false, false
}

func (m *ringMachine) Check(t *rapid.T) {
	if n := int(m.r.tail.Load() - m.r.head.Load()); n != len(m.queue) {
		t.Fatalf("ring holds %d, model %d", n, len(m.queue))
	}
}

func TestRingStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := rapid.IntRange(1, 9).Draw(t, "capacity")
		r := newRing[int](c)
		size := 1
		for size < c {
			size <<= 1
		}
		if int(r.size) != size {
			t.Fatalf("capacity %d: size %d, want %d", c, r.size, size)
		}
		t.Repeat(rapid.StateMachineActions(&ringMachine{r: r, size: size}))
	})
}

// TestLinksConcurrent moves units through each kind of link between two
// goroutines and checks they arrive in order, with their entry times.
func TestLinksConcurrent(t *testing.T) {
	checkNoLeaks(t)
	const n = 20000
	for _, c := range []int{1, 2, 3, 64} {
		for _, lk := range []link[int]{newRing[int](c)} {
			lk.reset()
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := range n {
					if err := lk.put(context.Background(), i, stamp{int64(i) + 1, int64(i) + 2}); err != nil {
						t.Errorf("put %d: %v", i, err)
						return
					}
				}
				lk.close(false)
			})
			for i := 0; ; i++ {
				v, sp, err := lk.get(context.Background())
				if err == io.EOF {
					if i != n {
						t.Fatalf("%T cap %d: EOF after %d units", lk, c, i)
					}
					break
				}
				if err != nil || v != i || sp != (stamp{int64(i) + 1, int64(i) + 2}) {
					t.Fatalf("%T cap %d: unit %d: %d, %v, %v", lk, c, i, v, sp, err)
				}
				lk.release()
			}
			wg.Wait()
		}
	}
}
