package nbd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"
)

// serverPlainDisk hides MemDisk's optional interfaces (Lender among
// them), as a file or proxy backend has none: its reads take buffers of
// the BufferMemory budget.
type serverPlainDisk struct{ m *MemDisk }

func (d serverPlainDisk) ReadAt(p []byte, off int64) (int, error)  { return d.m.ReadAt(p, off) }
func (d serverPlainDisk) WriteAt(p []byte, off int64) (int, error) { return d.m.WriteAt(p, off) }
func (d serverPlainDisk) Size() int64                              { return d.m.Size() }

// serverTimeoutLog is a slog.Handler that reports, on its channel, each
// connection failure matching ErrReplyTimeout.
type serverTimeoutLog struct{ timedOut chan struct{} }

func (h serverTimeoutLog) Enabled(context.Context, slog.Level) bool { return true }
func (h serverTimeoutLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h serverTimeoutLog) WithGroup(string) slog.Handler            { return h }
func (h serverTimeoutLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, ErrReplyTimeout) {
			select {
			case h.timedOut <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}

// A client that sends large READs and never reads the replies holds their
// buffers of the BufferMemory budget (all of it, here) while the replies
// cannot be written; ReplyTimeout closes its session and gives the budget
// back, so an honest client's READ, waiting for buffers meanwhile, is
// served. (Before ReplyTimeout, the session was never closed and the
// honest READ could wait for ever.)
func TestServerReplyTimeoutFreesStalledBudget(t *testing.T) {
	const mp = 1 << 20
	log := serverTimeoutLog{make(chan struct{}, 1)}
	s := &Server{
		Exports:      []Export{{Name: "", Backend: serverPlainDisk{NewMemDisk(16 << 20)}}},
		MaxPayload:   mp,
		BufferMemory: 2 * mp,
		// No shares: the stalled session may hold the whole budget.
		ConnBufferMemory: -1,
		ReplyTimeout:     500 * time.Millisecond,
		Logger:           slog.New(log),
	}
	path := serverTestStart(t, s)

	bad := stalledReads(t, path, mp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Best effort: the honest client comes once the stalled session
	// holds the whole budget (the reader may instead be writing the first
	// reply itself, holding less), or once it has been closed.
	timedOut := false
	for !timedOut && s.BufferStats().Reserved < s.BufferStats().Limit && ctx.Err() == nil {
		select {
		case <-log.timedOut:
			timedOut = true
		case <-time.After(time.Millisecond):
		}
	}

	c, err := Dial(ctx, "nbd+unix:///?socket="+path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Pread(ctx, make([]byte, 4096), 8<<20, 0); err != nil {
		t.Fatalf("an honest client's READ beside a client that reads no reply: %v", err)
	}
	if !timedOut {
		select {
		case <-log.timedOut:
		case <-ctx.Done():
			t.Fatal("the session that reads no reply was not closed for it")
		}
	}
	// Closed: its socket ends (or is reset, the server having left
	// requests unread) after what the server managed to write, less than
	// the six replies.
	n, err := io.Copy(io.Discard, bad.nc)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	if err != nil || n >= 6*mp {
		t.Fatalf("the stalled session's socket: %d bytes, %v; want its end before the replies", n, err)
	}
	for s.BufferStats().Reserved != 0 {
		if ctx.Err() != nil {
			t.Fatalf("budget still reserved after the stalled session ended: %+v", s.BufferStats())
		}
		time.Sleep(time.Millisecond)
	}
}

// ServeConn reports a session closed for not reading its replies with an
// error matching ErrReplyTimeout.
func TestServerReplyTimeoutServeConnError(t *testing.T) {
	s := &Server{
		Exports:      []Export{{Name: "", Backend: serverPlainDisk{NewMemDisk(16 << 20)}}},
		MaxPayload:   1 << 20,
		ReplyTimeout: 100 * time.Millisecond,
	}
	a, b := serverTestUnixPair(t)
	b.SetReadBuffer(4096)
	done := make(chan error, 1)
	go func() { done <- s.ServeConn(a) }()
	bad := &serverRawClient{t: t, nc: b}
	bad.negotiate("", false, false)
	for i := range 8 {
		bad.request(CmdRead, 0, uint64(i+1), uint64(i)<<20, 1<<20, nil)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrReplyTimeout) {
			t.Fatalf("ServeConn returned %v, want ErrReplyTimeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ServeConn still serving a client that reads nothing")
	}
}

// A client that reads its replies slowly, but takes each MiB well within
// ReplyTimeout, keeps its session even though its reply takes longer than
// ReplyTimeout in all.
func TestServerReplyTimeoutSlowReaderServed(t *testing.T) {
	const size = 6 << 20
	timeout := 1500 * time.Millisecond
	s := &Server{
		Exports:      []Export{{Name: "", Backend: serverPlainDisk{NewMemDisk(16 << 20)}}},
		MaxPayload:   size,
		ReplyTimeout: timeout,
	}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.nc.(*net.UnixConn).SetReadBuffer(4096)
	c.negotiate("", false, false)
	c.request(CmdRead, 0, 1, 0, size, nil)
	start := time.Now()
	r, _ := c.simple(0)
	if r.Error != 0 || r.Cookie != 1 {
		t.Fatalf("reply %+v", r)
	}
	buf := make([]byte, 1<<20)
	for range size >> 20 {
		time.Sleep(timeout / 5)
		if _, err := io.ReadFull(c.nc, buf); err != nil {
			t.Fatalf("reading the reply slowly: %v (after %v)", err, time.Since(start))
		}
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("the reply took %v, less than ReplyTimeout: the test proves nothing", d)
	}
	// The session is still served.
	c.request(CmdRead, 0, 2, 0, 512, nil)
	if r, _ := c.simple(512); r.Error != 0 || r.Cookie != 2 {
		t.Fatalf("next reply %+v", r)
	}
}

func TestServerReplyTimeoutDefault(t *testing.T) {
	for _, tc := range []struct{ set, want time.Duration }{
		{0, DefaultReplyTimeout}, {time.Second, time.Second}, {-1, 0},
	} {
		if got := (&Server{ReplyTimeout: tc.set}).replyTimeout(); got != tc.want {
			t.Errorf("ReplyTimeout %v: %v, want %v", tc.set, got, tc.want)
		}
	}
}

// Shutdown finishes although a client reads none of its replies: the
// session is closed after ReplyTimeout. (Before, Shutdown waited for its
// context.)
func TestServerReplyTimeoutShutdownCompletes(t *testing.T) {
	const mp = 1 << 20
	s := &Server{
		Exports:      []Export{{Name: "", Backend: serverPlainDisk{NewMemDisk(16 << 20)}}},
		MaxPayload:   mp,
		ReplyTimeout: 200 * time.Millisecond,
	}
	path := serverTestStart(t, s)
	stalledReads(t, path, mp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s.BufferStats().Reserved == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // a READ is being served
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a client that reads no reply: %v", err)
	}
}

// stalledReads opens a session that asks for six READs of mp bytes and
// reads none of the replies, through a small receive buffer.
func stalledReads(t *testing.T, path string, mp uint32) *serverRawClient {
	t.Helper()
	bad := serverTestDial(t, path)
	bad.nc.(*net.UnixConn).SetReadBuffer(4096)
	bad.negotiate("", true, false)
	for i := range uint64(6) {
		bad.request(CmdRead, 0, i+1, i*uint64(mp), mp, nil)
	}
	return bad
}
