package spin

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// trues counts the calls to More that return true before the first false,
// giving up at limit.
func trues(p *Pacer, limit int) int {
	n := 0
	for n < limit && p.More() {
		n++
	}
	return n
}

func TestPacerBoundedByChecks(t *testing.T) {
	tests := []struct {
		name string
		spin time.Duration
		want int
	}{
		{"park", -1, Checks - 1},
		{"one round", 0, Checks - 1 + YieldsPerClock},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPacer(tc.spin)
			if got := trues(&p, 1<<20); got != tc.want {
				t.Errorf("More true %d times, want %d", got, tc.want)
			}
			p.Reset()
			if got := trues(&p, 1<<20); got != tc.want {
				t.Errorf("after Reset: More true %d times, want %d", got, tc.want)
			}
		})
	}
}

// In a synctest bubble time stands still while the goroutine runs, so a
// positive spin goes on for as many checks as we like, and ends within one
// round of yields once the (fake) clock has passed it.
func TestPacerBoundedByTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 5 * time.Microsecond
		p := NewPacer(d)
		const many = 10 * Checks * YieldsPerClock
		if got := trues(&p, many); got != many {
			t.Fatalf("with the clock stopped More gave up after %d calls", got)
		}
		time.Sleep(d + 1) // the bubble's clock jumps
		if got := trues(&p, many); got > YieldsPerClock {
			t.Errorf("past the spin More went on %d more times, want at most %d", got, YieldsPerClock)
		}
		p.Reset()
		if got := trues(&p, many); got != many {
			t.Errorf("after Reset More gave up after %d calls", got)
		}
	})
}

// parker parks on g in a goroutine and records how Park returned.
type parker struct {
	returned atomic.Bool
	result   atomic.Bool
}

func (p *parker) park(g *Gate, want uint64, ready func() bool, done <-chan struct{}) {
	go func() {
		p.result.Store(g.Park(want, ready, done))
		p.returned.Store(true)
	}()
}

func TestGateWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		var counter atomic.Uint64
		var p parker
		p.park(&g, 5, func() bool { return counter.Load() >= 5 }, nil)
		synctest.Wait()
		if p.returned.Load() {
			t.Fatal("Park returned before the counter reached want")
		}
		counter.Store(4)
		g.Wake(4)
		synctest.Wait()
		if p.returned.Load() {
			t.Fatal("Wake(4) woke a waiter that wants 5")
		}
		counter.Store(5)
		g.Wake(5)
		synctest.Wait()
		if !p.returned.Load() || !p.result.Load() {
			t.Fatalf("after Wake(5): returned %v, result %v; want true, true", p.returned.Load(), p.result.Load())
		}
		if w := g.want.Load(); w != 0 {
			t.Errorf("want %d after the wake-up, want 0", w)
		}
	})
}

// The waker runs between the waiter's announcement and its block: ready
// reads the counter, then (standing for the other goroutine) the counter is
// stored and Wake called, and ready reports the value it read. Park must not
// miss that Wake, which only announcing before re-checking guarantees.
func TestGateWakeBetweenCheckAndBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		var counter atomic.Uint64
		ready := func() bool {
			v := counter.Load()
			counter.Store(5)
			g.Wake(5)
			return v >= 5
		}
		var p parker
		p.park(&g, 5, ready, nil)
		synctest.Wait()
		if !p.returned.Load() || !p.result.Load() {
			t.Fatal("a Wake between the re-check and the block was lost")
		}
	})
}

func TestGateReadyAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		if !g.Park(1, func() bool { return true }, nil) {
			t.Fatal("Park returned false with ready true")
		}
		if w := g.want.Load(); w != 0 {
			t.Errorf("want %d after Park returned, want 0", w)
		}
		// No waiter: Wake and Kick leave nothing behind.
		g.Wake(1 << 60)
		g.Kick()
		select {
		case <-g.ch:
			t.Error("Wake or Kick with no waiter left a token")
		default:
		}
	})
}

func TestGateKickAndDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		var closed atomic.Bool
		var p parker
		p.park(&g, 1, closed.Load, nil)
		synctest.Wait()
		closed.Store(true)
		g.Kick()
		synctest.Wait()
		if !p.returned.Load() || !p.result.Load() {
			t.Fatalf("Kick: returned %v, result %v; want true, true", p.returned.Load(), p.result.Load())
		}

		done := make(chan struct{})
		var q parker
		q.park(&g, 1, func() bool { return false }, done)
		synctest.Wait()
		if q.returned.Load() {
			t.Fatal("Park returned with nothing to wake it")
		}
		close(done)
		synctest.Wait()
		if !q.returned.Load() || q.result.Load() {
			t.Fatalf("done: returned %v, result %v; want true, false", q.returned.Load(), q.result.Load())
		}
		if w := g.want.Load(); w != 0 {
			t.Errorf("want %d after done, want 0", w)
		}
	})
}

func TestGateReset(t *testing.T) {
	g := NewGate()
	g.want.Store(3)
	g.Wake(3) // leaves a token: nobody took it
	g.Reset()
	if w := g.want.Load(); w != 0 {
		t.Errorf("want %d after Reset", w)
	}
	select {
	case <-g.ch:
		t.Error("Reset left a token")
	default:
	}
}

// With the spin over, Await parks, and Post wakes it: both spins that park
// without reading the clock, in a bubble where a parked goroutine is seen.
func TestEventParksAndPostWakes(t *testing.T) {
	for _, d := range []time.Duration{-1, 0} {
		synctest.Test(t, func(t *testing.T) {
			e := NewEvent()
			var got atomic.Uint64
			go func() { got.Store(e.Await(0, d)) }()
			synctest.Wait()
			if g := got.Load(); g != 0 {
				t.Fatalf("spin %v: Await returned %d with no post", d, g)
			}
			if w := e.g.want.Load(); w != 1 {
				t.Fatalf("spin %v: parked waiter wants %d, want 1", d, w)
			}
			e.Post()
			synctest.Wait()
			if g := got.Load(); g != 1 {
				t.Fatalf("spin %v: Await returned %d after one post, want 1", d, g)
			}
			// Posts made before the wait are counted at once.
			e.Post()
			e.Post()
			if n := e.Await(1, d); n != 3 {
				t.Errorf("spin %v: Await(1) = %d, want 3", d, n)
			}
		})
	}
}

// The poster writes a slot before each Post and the waiter reads the slots
// up to the count Await returns: under the race detector this checks that
// Await orders the waiter after the posts it reports.
func TestEventHandoffRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.SampledFrom([]time.Duration{-1, 0, time.Microsecond, Engine, 50 * time.Microsecond}).Draw(t, "spin")
		n := rapid.IntRange(1, 300).Draw(t, "posts")
		pauses := rapid.SliceOfN(rapid.IntRange(0, 3), n, n).Draw(t, "pauses")
		e := NewEvent()
		slots := make([]int, n)
		go func() {
			for i := range n {
				slots[i] = i + 1
				for range pauses[i] {
					time.Sleep(0)
				}
				e.Post()
			}
		}()
		var seen uint64
		for seen < uint64(n) {
			c := e.Await(seen, d)
			if c <= seen || c > uint64(n) {
				t.Fatalf("Await(%d) = %d, %d posts in all", seen, c, n)
			}
			for i := seen; i < c; i++ {
				if slots[i] != int(i)+1 {
					t.Fatalf("slot %d = %d after Await returned %d", i, slots[i], c)
				}
			}
			seen = c
		}
	})
}

// Two goroutines ping-pong through two events many times, with every spin
// kind: a lost wake-up hangs the test.
func TestEventPingPongStress(t *testing.T) {
	const rounds = 20000
	for _, d := range []time.Duration{-1, 0, time.Microsecond} {
		ping, pong := NewEvent(), NewEvent()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen uint64
			for range rounds {
				seen = ping.Await(seen, d)
				pong.Post()
			}
		}()
		var seen uint64
		for i := range rounds {
			ping.Post()
			seen = pong.Await(seen, d)
			if seen != uint64(i+1) {
				t.Fatalf("spin %v: round %d got count %d", d, i, seen)
			}
		}
		wg.Wait()
	}
}

// A counter grows in steps while a waiter parks for targets ahead of it,
// the way a FIFO's producer waits for room: every target is reached.
func TestGateCounterRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		steps := rapid.SliceOfN(rapid.IntRange(1, 4), 1, 200).Draw(t, "steps")
		d := rapid.SampledFrom([]time.Duration{-1, 0, time.Microsecond}).Draw(t, "spin")
		var total uint64
		for _, s := range steps {
			total += uint64(s)
		}
		g := NewGate()
		var counter atomic.Uint64
		go func() {
			var c uint64
			for _, s := range steps {
				c += uint64(s)
				counter.Store(c)
				g.Wake(c)
			}
		}()
		for target := uint64(1); target <= total; target += 3 {
			p := NewPacer(d)
			for counter.Load() < target {
				if p.More() {
					continue
				}
				g.Park(target, func() bool { return counter.Load() >= target }, nil)
				p.Reset()
			}
		}
	})
}

func TestEventNoAllocs(t *testing.T) {
	e := NewEvent()
	var seen uint64
	a := allocs.PerRun(1000, func() {
		e.Post()
		seen = e.Await(seen, -1)
	})
	if a > allocs.Slack {
		t.Errorf("%v allocations per Post and Await", a)
	}
}

func BenchmarkEventPingPong(b *testing.B) {
	for _, d := range []time.Duration{-1, Engine} {
		b.Run(time.Duration(d).String(), func(b *testing.B) {
			ping, pong := NewEvent(), NewEvent()
			go func() {
				var seen uint64
				for range b.N {
					seen = ping.Await(seen, d)
					pong.Post()
				}
			}()
			b.ReportAllocs()
			var seen uint64
			for range b.N {
				ping.Post()
				seen = pong.Await(seen, d)
			}
		})
	}
}
