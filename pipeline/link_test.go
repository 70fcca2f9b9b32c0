package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/nhdkit/nhd/fifo"
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
		for _, lk := range []link[int]{newRing[int](c), &chanLink[int]{capacity: c}, &queueLink[int]{q: newChanQueue[int](c), stamps: make([]stamp, c+2)}} {
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

func newTestFIFO(t testing.TB, blocks, bs int) *fifo.FIFO {
	f, err := fifo.New(fifo.Config{Blocks: blocks, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFIFOLink streams sectors through a FIFO link with stages on both
// sides and checks every byte arrives, in order, through runs repeated on
// the same FIFO.
func TestFIFOLink(t *testing.T) {
	checkNoLeaks(t)
	const bs, n = 512, 3000
	f := newTestFIFO(t, 16, bs)
	buf := make([]byte, bs)
	i := 0
	src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) {
		if i == n {
			return nil, io.EOF
		}
		for j := range buf {
			buf[j] = byte(i + j)
		}
		i++
		return buf, nil // reused: the FIFO link copies it
	})
	var got uint64
	bad := -1
	k := 0
	check := SinkFunc[[]byte](func(ctx context.Context, b []byte) error {
		for j := range b {
			if b[j] != byte(k+j)^0xff && bad < 0 {
				bad = k
			}
		}
		got += uint64(len(b))
		k++
		return nil
	})
	invert := StageFunc[[]byte, []byte](func(ctx context.Context, b []byte) ([]byte, error) {
		for j := range b {
			b[j] ^= 0xff // in place, in the FIFO's block
		}
		return b, nil
	})
	size := func(b []byte) int { return len(b) }
	l := Then(From("src", Source[[]byte](src)).Size(size), FIFO(f), "invert", Stage[[]byte, []byte](invert))
	p, err := l.Size(size).To(Inline(), "check", check)
	if err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		i, k, got, bad = 0, 0, 0, -1
		p.Instrument = run == 1
		r, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if bad >= 0 || got != n*bs || r.Units != n {
			t.Fatalf("run %d: first bad sector %d, %d bytes, %d units", run, bad, got, r.Units)
		}
		if p.Instrument && (r.Bytes != n*bs || r.RateUnit != "B/s" || r.Stages[1].Link != "fifo(16)") {
			t.Fatalf("report: %d bytes, %q, link %q", r.Bytes, r.RateUnit, r.Stages[1].Link)
		}
	}
}

func TestFIFOLinkWrongSize(t *testing.T) {
	checkNoLeaks(t)
	f := newTestFIFO(t, 8, 512)
	sent := 0
	src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) {
		sent++
		if sent == 5 {
			return make([]byte, 100), nil
		}
		return make([]byte, 512), nil
	})
	sink := &collect[[]byte]{}
	p, err := From("src", Source[[]byte](src)).To(FIFO(f), "sink", SinkFunc[[]byte](
		func(ctx context.Context, b []byte) error { return sink.Consume(ctx, bytes.Clone(b)) }))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Run(context.Background())
	var se *StageError
	if !errors.As(err, &se) || !errors.Is(err, ErrUnitSize) || se.Index != 0 || se.Unit != 4 {
		t.Fatalf("Run: %v", err)
	}
	// The source made unit 4 but could not hand it on: it failed there, and
	// the sink drained the four before.
	if len(sink.got) != 4 || r.Stages[1].State != StateDone || r.Stages[0].State != StateFailed || r.Stages[0].Units != 4 {
		t.Fatalf("sink got %d; report %+v", len(sink.got), r.Stages)
	}
}

func TestFIFOLinkType(t *testing.T) {
	f := newTestFIFO(t, 8, 512)
	_, err := From("src", Source[int](&counter{n: 1})).To(FIFO(f), "sink", &collect[int]{})
	if !errors.Is(err, ErrLink) {
		t.Fatalf("a FIFO link for int units: %v", err)
	}
}

// brokenQueue fails its third Get, as a queue over a broken transport
// would.
type brokenQueue struct {
	*chanQueue[int]
	gets int
}

func (q *brokenQueue) Get(ctx context.Context) (int, error) {
	q.gets++
	if q.gets == 3 {
		return 0, errBoom
	}
	return q.chanQueue.Get(ctx)
}

// TestQueueError: an error from a caller's Queue fails the stage that was
// taking its next unit from it.
func TestQueueError(t *testing.T) {
	checkNoLeaks(t)
	sink := &collect[int]{}
	p, err := From("src", Source[int](&counter{n: 100})).
		To(Through[int](&brokenQueue{chanQueue: newChanQueue[int](4)}), "sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Run(context.Background())
	var se *StageError
	if !errors.As(err, &se) || !errors.Is(err, errBoom) || se.Index != 1 || se.Unit != 2 {
		t.Fatalf("Run: %v", err)
	}
	if len(sink.got) != 2 || r.Stages[1].State != StateFailed || r.Stages[0].State != StateStopped {
		t.Fatalf("sink got %d; %+v", len(sink.got), r.Stages)
	}
}

// TestPropertyFIFOLinks: sectors through any mix of inline, ring and FIFO
// links (FIFOs of random small capacities, stages that rewrite the sector in
// place, in the FIFO's memory) arrive intact and in order, and a failure
// drains exactly the sectors before it.
func TestPropertyFIFOLinks(t *testing.T) {
	checkNoLeaks(t)
	const bs = 64
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 200).Draw(t, "sectors")
		m := rapid.IntRange(1, 4).Draw(t, "stages")
		fail := rapid.IntRange(-1, m).Draw(t, "failing stage") // 0 is the source
		failAt := rapid.IntRange(0, n).Draw(t, "failing sector")
		i := 0
		src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) {
			if i == n {
				return nil, io.EOF
			}
			if fail == 0 && i == failAt {
				return nil, errBoom
			}
			b := make([]byte, bs) // the pipeline owns it until the sink is done
			for j := range b {
				b[j] = byte(i*7 + j)
			}
			i++
			return b, nil
		})
		link := func(label string) Link {
			switch rapid.IntRange(0, 2).Draw(t, label) {
			case 1:
				return Ring(rapid.IntRange(1, 8).Draw(t, label+" capacity"))
			case 2:
				f, err := fifo.New(fifo.Config{Blocks: rapid.IntRange(1, 8).Draw(t, label+" blocks"), BlockSize: bs})
				if err != nil {
					t.Fatal(err)
				}
				return FIFO(f)
			}
			return Inline()
		}
		// After a FIFO link a sector is the FIFO's memory until the next
		// FIFO link copies it: a ring in between would hand it on past its
		// release (the Stage contract), so the test puts none there.
		inFIFO := false
		pick := func(label string) Link {
			lk := link(label)
			switch {
			case lk.Kind() == LinkFIFO:
				inFIFO = true
			case lk.Kind() == LinkRing && inFIFO:
				lk = Inline()
			}
			return lk
		}
		l := From("src", Source[[]byte](src))
		keys := make([]byte, m)
		for s := range m {
			keys[s] = rapid.Byte().Draw(t, "key")
			k, idx, seen := keys[s], s+1, 0
			l = Then(l, pick("link"), fmt.Sprintf("xor%d", s+1), StageFunc[[]byte, []byte](
				func(ctx context.Context, b []byte) ([]byte, error) {
					if fail == idx && seen == failAt {
						return nil, errBoom
					}
					seen++
					for j := range b {
						b[j] ^= k
					}
					return b, nil
				}))
		}
		var got [][]byte
		p, err := l.To(pick("sink link"), "sink", SinkFunc[[]byte](func(ctx context.Context, b []byte) error {
			got = append(got, bytes.Clone(b))
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		p.Instrument = rapid.Bool().Draw(t, "instrument")
		_, err = p.Run(context.Background())
		end := n
		if fail >= 0 && failAt < n {
			end = failAt
			var se *StageError
			if !errors.As(err, &se) || !errors.Is(err, errBoom) || se.Index != fail || se.Unit != uint64(failAt) {
				t.Fatalf("Run: %v, want stage %d unit %d", err, fail, failAt)
			}
		} else if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if len(got) != end {
			t.Fatalf("sink got %d sectors, want %d", len(got), end)
		}
		for u, b := range got {
			for j := range b {
				want := byte(u*7 + j)
				for _, k := range keys {
					want ^= k
				}
				if b[j] != want {
					t.Fatalf("sector %d byte %d: %#x, want %#x", u, j, b[j], want)
				}
			}
		}
	})
}
