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
// wait spin again.
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
		s.done(false)
		if n := parks(); n != want {
			t.Fatalf("after a spin ran out, %d waits parked at once, want %d", n, want)
		}
		want = min(2*want, clientSpinMaxBackoff)
	}
	s.done(true)
	if n := parks(); n != 0 {
		t.Fatalf("after a spin found its reply, %d waits parked at once", n)
	}
	s.done(false)
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

// TestClientSpinModel drives clientSpin with any sequence of waits and
// outcomes against a model that counts the waits since the last spin.
func TestClientSpinModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := clientSpin{window: time.Microsecond}
		failures := 0 // spins run out in a row
		since := 0    // waits parked at once since the last spin
		pending := false
		for i := range rapid.IntRange(1, 300).Draw(t, "waits") {
			if pending {
				found := rapid.Bool().Draw(t, "found")
				s.done(found)
				pending = false
				if found {
					failures = 0
				} else {
					failures++
				}
				since = 0
			}
			d := s.next()
			want := 0 // waits to park at once after the last spin
			if failures > 0 {
				want = min(1<<min(failures-1, 20), clientSpinMaxBackoff)
			}
			if spins := d > 0; spins != (since >= want) {
				t.Fatalf("wait %d: spins %v after %d parked at once and %d spins run out in a row", i, spins, since, failures)
			}
			if d > 0 {
				pending = true
			} else {
				since++
			}
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
