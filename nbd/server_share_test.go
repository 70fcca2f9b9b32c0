package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// serverShareStalled starts a server of four 1 MiB requests' budget that
// never ends a session for its replies, and a session that sends six
// 1 MiB READs and reads no reply; it returns the server's socket once the
// stalled session holds at least want bytes of the budget.
func serverShareStalled(t *testing.T, share, want int64) (*Server, string) {
	t.Helper()
	const mp = 1 << 20
	s := &Server{
		Exports:          []Export{{Name: "", Backend: serverPlainDisk{NewMemDisk(16 << 20)}}},
		MaxPayload:       mp,
		BufferMemory:     4 * mp,
		ConnBufferMemory: share,
		ReplyTimeout:     -1,
	}
	path := serverTestStart(t, s)
	bad := serverTestDial(t, path)
	bad.nc.(*net.UnixConn).SetReadBuffer(4096)
	bad.negotiate("", true, false)
	// The six READs in one write: the server's reader finds them buffered
	// together and reserves for four or more before it writes a reply.
	// Sent one by one, the reader could find the socket empty after the
	// first, write its reply and block there, holding 1 MiB for ever.
	var reqs []byte
	for i := range uint64(6) {
		var b [RequestSize]byte
		r := Request{Type: CmdRead, Cookie: i + 1, Offset: i * mp, Length: mp}
		r.Put(&b)
		reqs = append(reqs, b[:]...)
	}
	bad.write(reqs)
	t.Cleanup(func() { bad.nc.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for s.BufferStats().Reserved < want {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled session holds %+v, want %d bytes", s.BufferStats(), want)
		}
		time.Sleep(time.Millisecond)
	}
	return s, path
}

// A client that sends large READs and never reads the replies holds its
// share of the budget, no more, and another client's READ is served at
// once, though the stalled session is never closed (no ReplyTimeout).
// Without shares it holds the whole budget and the other READ waits: the
// second subtest checks that the first one tests something.
func TestServerConnShareStalledClient(t *testing.T) {
	t.Run("share", func(t *testing.T) {
		s, path := serverShareStalled(t, 0, 1<<20)
		c := serverShareDial(t, path)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Pread(ctx, make([]byte, 1<<20), 8<<20, 0); err != nil {
			t.Fatalf("a READ beside a client that reads no reply: %v", err)
		}
		// The READ's own buffers go once its reply is written, which
		// may be a moment after the client has it.
		for st := s.BufferStats(); st.Reserved > 1<<20; st = s.BufferStats() {
			if ctx.Err() != nil {
				t.Fatalf("the stalled session holds %d bytes, past its share of %d", st.Reserved, st.Limit/4)
			}
			time.Sleep(time.Millisecond)
		}
	})
	t.Run("no share", func(t *testing.T) {
		s, path := serverShareStalled(t, -1, 4<<20)
		c := serverShareDial(t, path)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := c.Pread(ctx, make([]byte, 4096), 8<<20, 0)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("without shares, a READ beside a session holding %+v returned %v; want it to wait", s.BufferStats(), err)
		}
	})
}

// serverShareDial connects a client to the server at path, closed at the
// end of the test.
func serverShareDial(t *testing.T, path string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, "nbd+unix:///?socket="+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Many requests of one session, some past its share, all complete with
// their data, and the session never holds more than the larger of its
// share and one request of MaxPayload (the only session here, so all the
// budget reserved is its). Requests past the share wait for the session's
// others to be answered, which never wait for them.
func TestServerConnShareOneSession(t *testing.T) {
	const share, mp = 1 << 20, 2 << 20
	for _, backend := range []struct {
		name string
		b    Backend
	}{
		{"buffers", serverPlainDisk{NewMemDisk(64 << 20)}},
		{"pages and lent reads", NewMemDisk(64 << 20)},
	} {
		t.Run(backend.name, func(t *testing.T) {
			s := &Server{
				Exports:          []Export{{Name: "", Backend: backend.b}},
				MaxPayload:       mp,
				BufferMemory:     16 << 20,
				ConnBufferMemory: share,
			}
			c := serverShareDial(t, serverTestStart(t, s))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			var peak atomic.Int64
			stop := make(chan struct{})
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Microsecond):
					}
					if r := s.BufferStats().Reserved; r > peak.Load() {
						peak.Store(r)
					}
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 16 {
				wg.Go(func() { errs <- serverShareWorker(ctx, c, g, mp) })
			}
			wg.Wait()
			close(stop)
			<-watched
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if p := peak.Load(); p > max(share, serverNeed(mp)) {
				t.Fatalf("the session held %d bytes of buffers, past max(share %d, one request %d)", p, share, serverNeed(mp))
			}
		})
	}
}

// serverShareWorker writes and reads back random spans of 4 KiB to max
// bytes in region g (4 MiB) of c's export.
func serverShareWorker(ctx context.Context, c *Client, g int, max int) error {
	rng := rand.New(rand.NewPCG(uint64(g), 1))
	base := int64(g) << 22
	for range 12 {
		n := (1 + rng.IntN(max/4096)) * 4096
		off := base + int64(rng.IntN((4<<20-n)/4096+1))*4096
		w := make([]byte, n)
		for i := range w {
			w[i] = byte(rng.Uint32())
		}
		if err := c.Pwrite(ctx, w, off, 0); err != nil {
			return fmt.Errorf("write of %d at %d: %w", n, off, err)
		}
		r := make([]byte, n)
		if err := c.Pread(ctx, r, off, 0); err != nil {
			return fmt.Errorf("read of %d at %d: %w", n, off, err)
		}
		if !bytes.Equal(r, w) {
			return fmt.Errorf("read of %d at %d: not the bytes written", n, off)
		}
	}
	return nil
}
