package nbd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// countingCtx is a context that can end, with an AfterFunc method of its
// own (which context.AfterFunc uses), counting the registrations made
// on it and those still live.
type countingCtx struct {
	context.Context // Background: no deadline, no values
	done            chan struct{}

	mu         sync.Mutex
	regs, live int
	fns        map[int]func()
}

func newCountingCtx() *countingCtx {
	return &countingCtx{Context: context.Background(), done: make(chan struct{}), fns: map[int]func(){}}
}

func (c *countingCtx) Done() <-chan struct{} { return c.done }

func (c *countingCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func (c *countingCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.regs++
	c.live++
	id := c.regs
	c.fns[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.fns[id]; !ok {
			return false
		}
		delete(c.fns, id)
		c.live--
		return true
	}
}

// cancel ends c and runs its registrations' functions, and waits for them.
func (c *countingCtx) cancel() {
	close(c.done)
	c.mu.Lock()
	fns := c.fns
	c.fns = map[int]func(){}
	c.live = 0
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

func (c *countingCtx) counts() (regs, live int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regs, c.live
}

// TestClientWatch follows clientWatch through the ways a connection uses
// it: a registration kept from the second read in a row under one Done
// channel, a new one when the channel changes, one dropped with its read
// when it is not kept, cuts only of a read in progress under the context
// that ended, none after close.
func TestClientWatch(t *testing.T) {
	kicks := 0 // under w.mu
	kicked := make(chan struct{}, 1)
	w := &clientWatch{kick: func() { kicks++; kicked <- struct{}{} }}
	if w.begin(context.Background()) {
		t.Fatal("armed for a context that never ends")
	}
	a := newCountingCtx()
	for range 100 {
		if !w.begin(a) {
			t.Fatal("not armed for a context that can end")
		}
		if w.end() {
			t.Fatal("cut with nothing ended")
		}
	}
	type key struct{}
	if !w.begin(context.WithValue(a, key{}, 1)) {
		t.Fatal("not armed for a child of a")
	}
	w.end()
	// The first read's registration went with it, the second's stays.
	if regs, live := a.counts(); regs != 2 || live != 1 {
		t.Fatalf("a: %d registrations, %d live; want 2, 1", regs, live)
	}

	// Another context: a's registration goes, b's comes. A callback of
	// a's that was already on its way when it went cuts nothing.
	b := newCountingCtx()
	w.begin(b)
	w.fire(a.done)
	if kicks != 0 {
		t.Fatal("a's late callback cut b's read")
	}
	if regs, live := a.counts(); regs != 2 || live != 0 {
		t.Fatalf("a: %d registrations, %d live; want 2, 0", regs, live)
	}
	b.cancel() // its callback runs on a goroutine of its own
	select {
	case <-kicked:
	case <-time.After(10 * time.Second):
		t.Fatal("b ended during its read and did not cut it")
	}
	if !w.end() {
		t.Fatal("b's cut not reported by end")
	}

	// An end outside any read cuts nothing.
	c := newCountingCtx()
	w.begin(c)
	w.end()
	w.fire(c.done)
	if kicks != 1 {
		t.Fatal("c ended between reads and cut one")
	}

	// A context for one read is not registered once that read is over.
	for range 3 {
		e := newCountingCtx()
		w.begin(e)
		w.end()
		if regs, live := e.counts(); regs != 1 || live != 0 {
			t.Fatalf("a context of one read: %d registrations, %d live after it; want 1, 0", regs, live)
		}
	}

	d := newCountingCtx()
	for range 2 {
		w.begin(d)
		w.end()
	}
	w.close()
	if regs, live := d.counts(); regs != 2 || live != 0 {
		t.Fatalf("d after close: %d registrations, %d live; want 2, 0", regs, live)
	}
	if w.begin(d) {
		t.Fatal("armed after close")
	}
	if regs, _ := d.counts(); regs != 2 {
		t.Fatal("registered after close")
	}
}

// TestClientContextRegistrations runs requests with one cancellable
// context: the connection registers with it at most twice for its reads
// and twice for its writes, not per request, keeps one of each, and drops
// both when it closes. Requests each with a context of its own leave no
// registration behind.
func TestClientContextRegistrations(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "w", Backend: NewMemDisk(1 << 20)}}})
	c, err := Dial(context.Background(), serverTestURI(path, "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	for i := range 20 {
		own := newCountingCtx()
		h, err := c.StartWriteAt(own, buf, int64(i)*4096)
		if err == nil {
			err = c.Wait(own, h)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, live := own.counts(); live != 0 {
			t.Fatalf("request %d: %d registrations with its own context live after it", i, live)
		}
	}
	ctx := newCountingCtx()
	for i := range 50 {
		w, err := c.StartWriteAt(ctx, buf, int64(i)*4096)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.StartReadAt(ctx, buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(ctx, w); err != nil {
			t.Fatal(err)
		}
		if err := c.Wait(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if regs, live := ctx.counts(); regs > 4 || live != 2 {
		t.Errorf("after 100 requests: %d registrations, %d live; want at most 4, 2 live", regs, live)
	}
	c.Close()
	_, live := ctx.counts()
	if diff := cmp.Diff(0, live); diff != "" {
		t.Errorf("registrations live after Close (-want +got):\n%s", diff)
	}
}

// BenchmarkCallContexts reads 64 KiB at a time from an
// in-process server with a context that never ends, with one that can
// (shared by every request), with a context of its own per request, and
// with WithRequestTimeout's (one per call, kept by the client for the
// next): all but the third should cost the same, the third what
// registering per request costs. (Its name keeps
// it out of the allocation check of BenchmarkClient and BenchmarkServer,
// docs/bench/figures.sh: a context per call allocates by design.)
//
//	go test -run '^$' -bench CallContexts -count=6 ./nbd
func BenchmarkCallContexts(b *testing.B) {
	path := serverTestStart(b, &Server{Exports: []Export{{Name: "b", Backend: NewMemDisk(64 << 20)}}})
	shared, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := func(ctx context.Context, c *Client, p []byte, off int64) error {
		h, err := c.StartReadAt(ctx, p, off)
		if err == nil {
			err = c.Wait(ctx, h)
		}
		return err
	}
	for _, bc := range []struct {
		name string
		opts []Option
		read func(c *Client, p []byte, off int64) error
	}{
		{"background", nil, func(c *Client, p []byte, off int64) error { return read(context.Background(), c, p, off) }},
		{"cancellable", nil, func(c *Client, p []byte, off int64) error { return read(shared, c, p, off) }},
		{"per-request", nil, func(c *Client, p []byte, off int64) error {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			return read(ctx, c, p, off)
		}},
		{"request-timeout", []Option{WithRequestTimeout(time.Minute)}, func(c *Client, p []byte, off int64) error {
			_, err := c.ReadAt(p, off)
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := Dial(context.Background(), serverTestURI(path, "b"), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			off := int64(0)
			for b.Loop() {
				if err := bc.read(c, buf, off); err != nil {
					b.Fatal(err)
				}
				off = (off + int64(len(buf))) % (64 << 20)
			}
		})
	}
}
