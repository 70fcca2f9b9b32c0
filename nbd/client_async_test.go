package nbd

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

const asyncSMSize = 3 * MemDiskChunkSize

// asyncCall is a call in flight in the state machine, with what it should
// find when waited for.
type asyncCall struct {
	call  Call
	write bool
	off   int64
	buf   []byte
}

func (a *asyncCall) overlaps(off, n int64) bool {
	return a.off < off+n && off < a.off+int64(len(a.buf))
}

// TestClientAsyncStateMachine keeps up to 6 READ and WRITE calls in flight
// from one goroutine, waits for them in any order, and checks every read
// and the whole disk against a byte-slice model. A new write overlaps no
// call in flight and a new read no write in flight (the server may serve
// requests in flight in any order, so nothing else has a defined result).
func TestClientAsyncStateMachine(t *testing.T) {
	d := NewMemDisk(asyncSMSize)
	path := serverTestStart(t, &Server{MaxInFlight: 8, Exports: []Export{{Name: "a", Backend: d}}})
	ctx := context.Background()
	uri := serverTestURI(path, "a")
	for _, cfg := range []struct {
		name string
		opts []Option
	}{
		{"structured", nil},
		{"simple", []Option{WithStructuredReplies(false)}},
		{"multiconn", []Option{WithConnections(2)}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			c, err := Dial(ctx, uri, cfg.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rapid.Check(t, func(rt *rapid.T) {
				if err := d.Trim(ctx, 0, asyncSMSize); err != nil {
					rt.Fatal(err)
				}
				model := make([]byte, asyncSMSize)
				var inflight []*asyncCall
				waitAt := func(rt *rapid.T, i int) {
					a := inflight[i]
					inflight = append(inflight[:i], inflight[i+1:]...)
					if err := a.call.Wait(ctx); err != nil {
						rt.Fatalf("Wait(write=%v, %d+%d): %v", a.write, a.off, len(a.buf), err)
					}
					if !a.write && !bytes.Equal(a.buf, model[a.off:a.off+int64(len(a.buf))]) {
						rt.Fatalf("read of %d+%d returned other bytes than the model's", a.off, len(a.buf))
					}
				}
				rt.Repeat(map[string]func(*rapid.T){
					"start": func(rt *rapid.T) {
						if len(inflight) == 6 {
							rt.Skip("6 in flight")
						}
						write := rapid.Bool().Draw(rt, "write")
						off := rapid.Int64Range(0, asyncSMSize-1).Draw(rt, "off")
						n := rapid.Int64Range(1, min(asyncSMSize-off, 200<<10)).Draw(rt, "n")
						for _, a := range inflight {
							if a.overlaps(off, n) && (write || a.write) {
								rt.Skip("would race a call in flight")
							}
						}
						a := &asyncCall{write: write, off: off, buf: make([]byte, n)}
						var err error
						if write {
							seed := rapid.Byte().Draw(rt, "seed")
							for i := range a.buf {
								a.buf[i] = seed + byte(i*7)
							}
							copy(model[off:], a.buf)
							a.call, err = c.StartWrite(ctx, a.buf, off, 0)
						} else {
							a.call, err = c.StartRead(ctx, a.buf, off, 0)
						}
						if err != nil {
							rt.Fatalf("start(write=%v, %d+%d): %v", write, off, n, err)
						}
						inflight = append(inflight, a)
					},
					"waitOldest": func(rt *rapid.T) {
						if len(inflight) == 0 {
							rt.Skip("nothing in flight")
						}
						waitAt(rt, 0)
					},
					"waitAny": func(rt *rapid.T) {
						if len(inflight) == 0 {
							rt.Skip("nothing in flight")
						}
						waitAt(rt, rapid.IntRange(0, len(inflight)-1).Draw(rt, "which"))
					},
				})
				for len(inflight) > 0 {
					waitAt(rt, len(inflight)-1)
				}
				got := make([]byte, asyncSMSize)
				if _, err := c.ReadAt(got, 0); err != nil {
					rt.Fatal(err)
				}
				if !bytes.Equal(got, model) {
					rt.Fatal("the disk differs from the model")
				}
			})
		})
	}
}

// asyncFailDisk fails reads and writes that touch its last chunk with EIO.
type asyncFailDisk struct {
	*MemDisk
	serverNotLender // its ReadAt fails: the server must not read around it
}

func (d asyncFailDisk) bad(p []byte, off int64) bool {
	return off+int64(len(p)) > d.Size()-MemDiskChunkSize
}

func (d asyncFailDisk) ReadAt(p []byte, off int64) (int, error) {
	if d.bad(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.ReadAt(p, off)
}

func (d asyncFailDisk) WriteAt(p []byte, off int64) (int, error) {
	if d.bad(p, off) {
		return 0, syscall.EIO
	}
	return d.MemDisk.WriteAt(p, off)
}

// TestClientAsyncErrors: what StartRead, StartWrite and Wait refuse
// locally, and a server error reaching Wait (with the read buffer zeroed).
func TestClientAsyncErrors(t *testing.T) {
	const size = 4 << 20
	disk := asyncFailDisk{MemDisk: NewMemDisk(size)}
	// Data in the failing chunk, so the server reads it (a hole it would
	// send without asking).
	if _, err := disk.MemDisk.WriteAt([]byte{1}, size-1); err != nil {
		t.Fatal(err)
	}
	path := serverTestStart(t, &Server{MaxPayload: 1 << 20, Exports: []Export{
		{Name: "rw", Backend: disk},
		{Name: "ro", Backend: NewMemDisk(size), ReadOnly: true},
	}})
	ctx := context.Background()
	c, err := Dial(ctx, serverTestURI(path, "rw"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ro, err := Dial(ctx, serverTestURI(path, "ro"))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		name  string
		start func() (Call, error)
		want  error
	}{
		{"read past the end", func() (Call, error) { return c.StartRead(ctx, buf, size-100, 0) }, ErrOutOfRange},
		{"negative offset", func() (Call, error) { return c.StartRead(ctx, buf, -1, 0) }, ErrOutOfRange},
		{"write past the end", func() (Call, error) { return c.StartWrite(ctx, buf, size, 0) }, ErrOutOfRange},
		{"read too large", func() (Call, error) { return c.StartRead(ctx, make([]byte, 2<<20), 0, 0) }, ErrTooLarge},
		{"write too large", func() (Call, error) { return c.StartWrite(ctx, make([]byte, 2<<20), 0, 0) }, ErrTooLarge},
		{"read with FUA", func() (Call, error) { return c.StartRead(ctx, buf, 0, FlagFUA) }, nil},
		{"write to read-only", func() (Call, error) { return ro.StartWrite(ctx, buf, 0, 0) }, ErrReadOnly},
		{"cancelled", func() (Call, error) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return c.StartRead(cctx, buf, 0, 0)
		}, context.Canceled},
	} {
		call, err := tc.start()
		if tc.want == nil {
			// Any refusal will do, as long as nothing was sent.
			if err == nil {
				t.Errorf("%s: started", tc.name)
				call.Wait(ctx)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if call.cc != nil || call.read != nil {
			t.Errorf("%s: a refused start returned a call", tc.name)
		}
	}

	// A zero-length call completes at once.
	call, err := c.StartRead(ctx, nil, 0, 0)
	if err != nil || call.Wait(ctx) != nil {
		t.Errorf("zero-length read: %v", err)
	}

	// The server fails a read and a write; good calls around them are
	// unaffected, whatever order they are waited in.
	bad := int64(size - MemDiskChunkSize)
	good := bytes.Repeat([]byte{0xa5}, 4096)
	w, err := c.StartWrite(ctx, good, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rbad := bytes.Repeat([]byte{1}, 4096)
	rgood := make([]byte, 4096)
	calls := make([]Call, 3)
	for i, f := range []func() (Call, error){
		func() (Call, error) { return c.StartRead(ctx, rbad, bad, 0) },
		func() (Call, error) { return c.StartWrite(ctx, good, bad, 0) },
		func() (Call, error) { return c.StartRead(ctx, rgood, 0, 0) },
	} {
		if calls[i], err = f(); err != nil {
			t.Fatal(err)
		}
	}
	if err := calls[2].Wait(ctx); err != nil || !bytes.Equal(rgood, good) {
		t.Errorf("good read after two bad calls: %v", err)
	}
	for i, want := range []error{syscall.EIO, syscall.EIO} {
		var se *ServerError
		if err := calls[i].Wait(ctx); !errors.Is(err, want) || !errors.As(err, &se) {
			t.Errorf("bad call %d: %v, want a *ServerError matching %v", i, err, want)
		}
	}
	if !bytes.Equal(rbad, make([]byte, len(rbad))) {
		t.Error("a failed read's buffer was not zeroed")
	}

	c.Close()
	if _, err := c.StartRead(ctx, buf, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("StartRead after Close: %v, want ErrClosed", err)
	}
}

// asyncStuckDisk holds every read at or past stuckAt until released.
type asyncStuckDisk struct {
	*MemDisk
	stuckAt int64
	release chan struct{}
}

func (d *asyncStuckDisk) ReadAt(p []byte, off int64) (int, error) {
	if off >= d.stuckAt {
		<-d.release
	}
	return d.MemDisk.ReadAt(p, off)
}

// TestClientAsyncAbandon: a Wait whose ctx ends gives up on its call
// (whose buffer is then zeroed and no longer written), and the connection
// goes on serving the calls after it.
func TestClientAsyncAbandon(t *testing.T) {
	d := &asyncStuckDisk{MemDisk: NewMemDisk(4 * MemDiskChunkSize), stuckAt: MemDiskChunkSize, release: make(chan struct{})}
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "s", Backend: d}}})
	ctx := context.Background()
	if _, err := d.MemDisk.WriteAt(bytes.Repeat([]byte{7}, 2*MemDiskChunkSize), 0); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, serverTestURI(path, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stuck := make([]byte, 512)
	call, err := c.StartRead(ctx, stuck, d.stuckAt, 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := call.Wait(wctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v", err)
	}
	ok := make([]byte, 512)
	next, err := c.StartRead(ctx, ok, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The server may hold the next request behind the stuck one (it may
	// serve a lone request on the goroutine that reads requests), so the
	// stuck one is released before waiting; its reply comes first and is
	// dropped.
	close(d.release)
	if err := next.Wait(ctx); err != nil || !bytes.Equal(ok, bytes.Repeat([]byte{7}, 512)) {
		t.Fatalf("the call after an abandoned one: %v", err)
	}
	if _, err := c.ReadAt(ok, d.stuckAt); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stuck, make([]byte, 512)) {
		t.Error("an abandoned read's buffer was written")
	}
}
