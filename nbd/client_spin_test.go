package nbd

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestClientSpinBackoff: a spin that runs out makes the next waits park at
// once, 1, 2, 4, ... of them while spins keep running out, never more
// than clientSpinMaxBackoff; a spin that finds its reply makes the next
// wait spin again. (No wait is timed here, so both ways' averages stay
// unmeasured and spinning stays the preferred way; the test makes fewer
// than clientSpinPeriod-clientSpinBlock choices, so none of them tries
// parking.)
func TestClientSpinBackoff(t *testing.T) {
	s := clientSpin{window: 10 * time.Microsecond}
	parks := func() int { // waits that park at once before the next spin
		n := 0
		for s.next() == 0 {
			n++
			if n > clientSpinMaxBackoff {
				t.Fatalf("more than %d waits park at once", clientSpinMaxBackoff)
			}
		}
		return n
	}
	if n := parks(); n != 0 {
		t.Fatalf("a fresh connection parks %d waits before spinning", n)
	}
	want := 1
	for range 14 {
		s.done(spinRanOut, 0)
		if n := parks(); n != want {
			t.Fatalf("after a spin ran out, %d waits parked at once, want %d", n, want)
		}
		want = min(2*want, clientSpinMaxBackoff)
	}
	s.done(spinFound, 0)
	if n := parks(); n != 0 {
		t.Fatalf("after a spin found its reply, %d waits parked at once", n)
	}
	s.done(spinRanOut, 0)
	if n := parks(); n != 1 {
		t.Fatalf("after a success and then a spin that ran out, %d waits parked at once, want 1", n)
	}
	off := clientSpin{}
	for range 3 {
		if d := off.next(); d != 0 {
			t.Fatalf("window 0 spins %v", d)
		}
	}
}

// TestClientSpinModel drives clientSpin with any sequence of spin outcomes
// and waits against a model: the backoff counts the waits since the last
// spin; each way's mean is that of its waits (each capped at clientSpinCap
// times the higher mean once both ways have clientSpinSettled, halved in
// weight when the two ways reach clientSpinHorizon); a wait not held back by the
// backoff takes a way with too few waits (spinning first), else the way of
// the lower mean, but for the last clientSpinBlock of every
// clientSpinPeriod, which take the other; only waits after clientSpinWarm
// of the same way in a row count.
func TestClientSpinModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := clientSpin{window: time.Microsecond}
		failures := 0            // spins run out in a row
		since := 0               // waits parked at once since the last spin
		turn := 0                // choices not held back, in the current period
		same := 0                // waits in a row of the way of the last
		last := false            // the way of the last wait: spun
		var sum [2]time.Duration // of each way's waits: parked, spun
		var n [2]int
		mean := func(w int) time.Duration {
			if n[w] == 0 {
				return 0
			}
			return sum[w] / time.Duration(n[w])
		}
		for i := range rapid.IntRange(1, 3000).Draw(t, "waits") {
			want := 0 // waits to park at once after the last spin
			if failures > 0 {
				want = min(1<<min(failures-1, 20), clientSpinMaxBackoff)
			}
			wantSpin := false
			if since >= want {
				switch {
				case n[1] < clientSpinSettled:
					wantSpin = true
				case n[0] < clientSpinSettled:
					wantSpin = false
				default:
					wantSpin = mean(1) <= mean(0)
				}
				if turn++; turn > clientSpinPeriod-clientSpinBlock {
					wantSpin = !wantSpin
					if turn == clientSpinPeriod {
						turn = 0
					}
				}
			}
			if wantSpin == last {
				same++
			} else {
				same = 0
			}
			last = wantSpin
			d := s.next()
			if spins := d > 0; spins != wantSpin {
				t.Fatalf("wait %d: spins %v, want %v (%d parked at once after %d spins run out in a row; %v parked waits of mean %v, %v spun of mean %v)",
					i, spins, wantSpin, since, failures, n[0], mean(0), n[1], mean(1))
			}
			spun, waited := spinNone, time.Duration(0)
			if wantSpin {
				since = 0
				if rapid.Bool().Draw(t, "found") {
					spun, failures = spinFound, 0
				} else {
					spun = spinRanOut
					failures++
				}
			} else {
				since++
			}
			if rapid.IntRange(0, 3).Draw(t, "timed") > 0 {
				waited = time.Duration(rapid.Int64Range(1, int64(time.Millisecond)).Draw(t, "waited"))
			}
			if waited > 0 && same >= clientSpinWarm {
				w := 0
				if wantSpin {
					w = 1
				}
				x := waited
				if n[0] >= clientSpinSettled && n[1] >= clientSpinSettled {
					x = min(x, clientSpinCap*max(mean(0), mean(1)))
				}
				sum[w] += x
				n[w]++
				if n[0]+n[1] >= clientSpinHorizon {
					for w := range 2 {
						if n[w] > 1 {
							m := (n[w] + 1) / 2
							sum[w] = sum[w] * time.Duration(m) / time.Duration(n[w])
							n[w] = m
						}
					}
				}
			}
			s.done(spun, waited)
		}
	})
}

// TestClientSpinFollowsTheFasterWay: whichever way of waiting for a reply
// is faster on a machine (spinning or parking), all but the blocks that
// try the other way take it once both ways are measured, and when the
// machine changes (the faster way becomes the slower) the choice follows.
func TestClientSpinFollowsTheFasterWay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spinCost := time.Duration(rapid.Int64Range(int64(time.Microsecond), int64(time.Millisecond)).Draw(t, "spin"))
		parkCost := time.Duration(rapid.Int64Range(int64(time.Microsecond), int64(time.Millisecond)).Draw(t, "park"))
		if spinCost*10 > parkCost*9 && parkCost*10 > spinCost*9 {
			t.Skip("the two ways within 10% of each other")
		}
		s := clientSpin{window: MaxClientReplySpin}
		// run makes n waits and counts those that took the slower way,
		// in the first half and in the second.
		run := func(n int, spinCost, parkCost time.Duration) (first, second int) {
			for i := range n {
				spun := s.next() > 0
				cost := parkCost
				if spun {
					cost = spinCost
					s.done(spinFound, cost)
				} else {
					s.done(spinNone, cost)
				}
				if spun != (spinCost < parkCost) {
					if i < n/2 {
						first++
					} else {
						second++
					}
				}
			}
			return first, second
		}
		const n = 8 * clientSpinPeriod
		tries := (n/2/clientSpinPeriod + 1) * clientSpinBlock
		first, second := run(n, spinCost, parkCost)
		if settle := clientSpinWarm + clientSpinSettled; first > tries+settle || second > tries {
			t.Fatalf("spin %v, park %v: %d and %d waits of two halves of %d took the slower way, want at most %d and %d",
				spinCost, parkCost, first, second, n/2, tries+settle, tries)
		}
		// The machine changes: the other way is now the faster by as much.
		first, second = run(n, parkCost, spinCost)
		if first >= n/2 || second > tries {
			t.Fatalf("after the change (spin %v, park %v): %d and %d waits of two halves of %d took the slower way, want fewer than %d and at most %d",
				parkCost, spinCost, first, second, n/2, n/2, tries)
		}
	})
}

// TestClientSpinSlowServer: replies that come long after the spin window
// are read all the same, and the connection's spins back off.
func TestClientSpinSlowServer(t *testing.T) {
	d := NewMemDisk(1 << 20)
	want := make([]byte, 4096)
	for i := range want {
		want[i] = byte(i * 7)
	}
	d.WriteAt(want, 8192)
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: slowBackend{d, 3 * time.Millisecond}}}})
	c, err := Dial(context.Background(), "nbd+unix:///?socket="+path, WithReplySpin(20*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.conns[0].raw == nil {
		t.Fatal("no raw socket: the spin is not exercised")
	}
	buf := make([]byte, 4096)
	for range 10 {
		if _, err := c.ReadAt(buf, 8192); err != nil {
			t.Fatal(err)
		}
		if string(buf) != string(want) {
			t.Fatal("read the wrong bytes")
		}
	}
	if c.conns[0].spin.backoff < 2 {
		t.Errorf("after ten slow replies the spin's backoff is %d, want at least 2 (4 unless a spin was held up for a whole delay)", c.conns[0].spin.backoff)
	}
}

// slowBackend answers reads after a delay; it has only Backend's methods,
// so the server cannot lend the disk's memory around ReadAt.
type slowBackend struct {
	d     *MemDisk
	delay time.Duration
}

func (s slowBackend) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(s.delay)
	return s.d.ReadAt(p, off)
}

func (s slowBackend) WriteAt(p []byte, off int64) (int, error) { return s.d.WriteAt(p, off) }
func (s slowBackend) Size() int64                              { return s.d.Size() }

func TestWithReplySpinWindow(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{-time.Second, 0}, {0, 0}, {time.Microsecond, time.Microsecond},
		{MaxClientReplySpin, MaxClientReplySpin}, {time.Second, MaxClientReplySpin},
	} {
		if got := newClientConfig([]Option{WithReplySpin(c.in)}).replySpin; got != c.want {
			t.Errorf("WithReplySpin(%v): window %v, want %v", c.in, got, c.want)
		}
	}
	if got := newClientConfig(nil).replySpin; got != DefaultClientReplySpin {
		t.Errorf("default window %v, want %v", got, DefaultClientReplySpin)
	}
}
