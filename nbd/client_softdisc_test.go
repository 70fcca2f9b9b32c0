package nbd

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proto.md, "Terminating the transmission phase": "If the client receives
// an ESHUTDOWN error it MUST initiate a soft disconnect." After one
// ESHUTDOWN reply the next thing on the wire is NBD_CMD_DISC, and a new
// call is refused locally with ErrServerShutdown (matching
// syscall.ESHUTDOWN). Before, the client sent the next READ.
func TestClientESHUTDOWNSoftDisconnect(t *testing.T) {
	got := make(chan Request, 1)
	c, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		p.chunk(r.Cookie, ReplyFlagDone, ChunkError, AppendErrorChunk(nil, &ErrorChunk{Error: ESHUTDOWN, Message: "going down"}))
		r2, _ := p.request()
		got <- r2
		p.hangup()
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	if _, err := c.ReadAt(buf, 0); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Fatalf("first read: %v, want the server's ESHUTDOWN", err)
	}
	_, err2 := c.ReadAt(buf, 512)
	if !errors.Is(err2, ErrServerShutdown) || !errors.Is(err2, syscall.ESHUTDOWN) || ErrnoOf(err2) != ESHUTDOWN {
		t.Errorf("call after ESHUTDOWN: %v, want ErrServerShutdown matching ESHUTDOWN", err2)
	}
	select {
	case r2 := <-got:
		if r2.Type != CmdDisc {
			t.Errorf("after ESHUTDOWN the client sent %v, want NBD_CMD_DISC", r2.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no NBD_CMD_DISC after ESHUTDOWN")
	}
}

// A soft disconnect lets the requests already in flight finish: the
// second READ, sent before the ESHUTDOWN reply came, gets its data, and
// only then does NBD_CMD_DISC go out.
func TestClientESHUTDOWNFinishesInFlight(t *testing.T) {
	refused := make(chan struct{})
	sentFirst := make(chan struct{})
	disc := make(chan Request, 1)
	c, err := clientScripted(t, func(p *clientPeer) {
		cfg := clientDefaultScript()
		cfg.structured = false
		p.handshake(cfg)
		r1, _ := p.request()
		close(sentFirst)
		r2, _ := p.request()
		p.simple(r1.Cookie, ESHUTDOWN, nil)
		<-refused // the client refused a third call meanwhile
		p.simple(r2.Cookie, 0, make([]byte, r2.Length))
		r3, _ := p.request()
		disc <- r3
		p.hangup()
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := clientAsync(func() error { return c.Pread(ctx, make([]byte, 512), 0, 0) })
	<-sentFirst
	second := clientAsync(func() error { return c.Pread(ctx, make([]byte, 512), 512, 0) })
	if err := clientWaitErr(t, first); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Fatalf("first READ: %v, want ESHUTDOWN", err)
	}
	if err := c.Pread(ctx, make([]byte, 512), 1024, 0); !errors.Is(err, ErrServerShutdown) {
		t.Errorf("READ after ESHUTDOWN: %v, want ErrServerShutdown", err)
	}
	close(refused)
	if err := clientWaitErr(t, second); err != nil {
		t.Errorf("READ in flight when ESHUTDOWN came: %v, want success", err)
	}
	select {
	case r := <-disc:
		if r.Type != CmdDisc {
			t.Errorf("after the last reply the client sent %v, want NBD_CMD_DISC", r.Type)
		}
	case <-ctx.Done():
		t.Fatal("no NBD_CMD_DISC")
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after a soft disconnect: %v", err)
	}
}

// clientStranded plays a server that takes two READs, answers the first
// ESHUTDOWN and never the second, then reads the client's next request
// (its NBD_CMD_DISC) and counts the bytes that follow it until the client
// hangs up.
type clientStranded struct {
	first   chan struct{}  // the first READ arrived
	replied chan time.Time // when the ESHUTDOWN reply went out
	next    chan Request   // the request after the two READs
	after   chan int64     // bytes sent after it
}

func newClientStranded() *clientStranded {
	return &clientStranded{
		first:   make(chan struct{}),
		replied: make(chan time.Time, 1),
		next:    make(chan Request, 1),
		after:   make(chan int64, 1),
	}
}

func (s *clientStranded) script(p *clientPeer) {
	cfg := clientDefaultScript()
	cfg.structured = false
	p.handshake(cfg)
	r1, _ := p.request()
	close(s.first)
	p.request() // never answered
	s.replied <- time.Now()
	p.simple(r1.Cookie, ESHUTDOWN, nil)
	r, _ := p.request()
	s.next <- r
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := io.Copy(io.Discard, p.conn)
	s.after <- n
}

// start sends the two READs on c, the second with no deadline (ReadAt),
// waits until the first fails with the server's ESHUTDOWN, and returns the
// result of the second, still in flight.
func (s *clientStranded) start(t *testing.T, c *Client) <-chan error {
	t.Helper()
	first := clientAsync(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.Pread(ctx, make([]byte, 512), 0, 0)
	})
	<-s.first
	second := clientAsync(func() error {
		_, err := c.ReadAt(make([]byte, 512), 512)
		return err
	})
	if err := clientWaitErr(t, first); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Fatalf("first READ: %v, want the server's ESHUTDOWN", err)
	}
	return second
}

// disc checks that the client's next request was NBD_CMD_DISC and that
// nothing followed it.
func (s *clientStranded) disc(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.next:
		if r.Type != CmdDisc {
			t.Errorf("after ESHUTDOWN the client sent %v, want NBD_CMD_DISC", r.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no NBD_CMD_DISC")
	}
	select {
	case n := <-s.after:
		if n != 0 {
			t.Errorf("%d bytes after NBD_CMD_DISC", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not hang up after NBD_CMD_DISC")
	}
}

// clientConnGoroutines returns the stacks of the goroutines running in a
// client connection's code (callers waiting on it, drains, the soft
// disconnect, the context watches).
func clientConnGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var ours []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "nbd.(*clientConn)") || strings.Contains(g, "nbd.(*clientWatch)") {
			ours = append(ours, g)
		}
	}
	return ours
}

// clientNoConnGoroutines fails t unless, within two seconds, no more
// goroutines run in a client connection's code than base.
func clientNoConnGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		g := clientConnGoroutines()
		if len(g) <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines left in the client's code:\n\n%s", len(g)-base, strings.Join(g, "\n\n"))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A server that answers one request ESHUTDOWN and never answers another
// in flight held that request (a ReadAt, with no deadline) and the
// connection until Close: the soft disconnect waited for ever. Now it
// waits WithSoftDisconnectTimeout: the READ fails after it with an error
// matching ErrServerShutdown and ErrConnectionLost (and ESHUTDOWN), the
// client sends NBD_CMD_DISC and hangs up, later calls fail the same way,
// and no goroutine is left, before Close.
func TestClientESHUTDOWNSoftDisconnectTimeout(t *testing.T) {
	const wait = 50 * time.Millisecond
	base := len(clientConnGoroutines())
	s := newClientStranded()
	c, err := clientScripted(t, s.script, WithSoftDisconnectTimeout(wait))
	if err != nil {
		t.Fatal(err)
	}
	second := s.start(t, c)
	err = clientWaitErr(t, second)
	took := time.Since(<-s.replied)
	if !errors.Is(err, ErrServerShutdown) || !errors.Is(err, ErrConnectionLost) ||
		!errors.Is(err, syscall.ESHUTDOWN) || ErrnoOf(err) != ESHUTDOWN {
		t.Errorf("READ left unanswered: %v, want ErrServerShutdown and ErrConnectionLost matching ESHUTDOWN", err)
	}
	if took < wait || took > 3*time.Second {
		t.Errorf("READ left unanswered failed %v after the ESHUTDOWN reply, want %v (and not much more)", took, wait)
	}
	s.disc(t)
	if _, err := c.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrServerShutdown) {
		t.Errorf("READ after the soft disconnect: %v, want ErrServerShutdown", err)
	}
	clientNoConnGoroutines(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown after the soft disconnect: %v", err)
	}
}

// WithSoftDisconnectTimeout(0), like no option, is the default bound;
// d < 0 is none.
func TestClientSoftDisconnectTimeoutDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"none", nil, DefaultClientSoftDisconnectTimeout},
		{"zero", []Option{WithSoftDisconnectTimeout(0)}, DefaultClientSoftDisconnectTimeout},
		{"set", []Option{WithSoftDisconnectTimeout(time.Second)}, time.Second},
		{"negative", []Option{WithSoftDisconnectTimeout(-1)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := clientScripted(t, func(p *clientPeer) {
				p.handshake(clientDefaultScript())
				p.hangup()
			}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.conns[0].shutWait; got != tc.want {
				t.Errorf("soft disconnect waits %v, want %v", got, tc.want)
			}
		})
	}
}

// A Close or Shutdown during a soft disconnect: Close fails the READ left
// unanswered with ErrClosed at once; Shutdown, with no deadline of its
// own, waited for ever with the soft disconnect and now returns when the
// soft disconnect's wait runs out. Either way one NBD_CMD_DISC goes out,
// nothing after it, and no goroutine is left.
func TestClientCloseDuringSoftDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wait    time.Duration
		end     func(c *Client) error
		pending error // the unanswered READ's error matches it
	}{
		{"Close", time.Minute, (*Client).Close, ErrClosed},
		{"Shutdown", 50 * time.Millisecond, func(c *Client) error { return c.Shutdown(context.Background()) }, ErrServerShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := len(clientConnGoroutines())
			s := newClientStranded()
			c, err := clientScripted(t, s.script, WithSoftDisconnectTimeout(tc.wait))
			if err != nil {
				t.Fatal(err)
			}
			second := s.start(t, c)
			if err := clientWaitErr(t, clientAsync(func() error { return tc.end(c) })); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			if err := clientWaitErr(t, second); !errors.Is(err, tc.pending) {
				t.Errorf("READ left unanswered: %v, want %v", err, tc.pending)
			}
			s.disc(t)
			clientNoConnGoroutines(t, base)
		})
	}
}

// With several connections only the one that got ESHUTDOWN closes when
// its soft disconnect stops waiting: the Client goes on taking the
// connections in turn, so calls on that one fail with ErrServerShutdown
// while the other serves its calls, and Flush, which needs every
// connection, fails.
func TestClientSoftDisconnectMultiConn(t *testing.T) {
	s := newClientStranded()
	c, err := clientScripted(t, s.script, WithSoftDisconnectTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	other, err := clientScripted(t, func(p *clientPeer) {
		p.handshake(clientDefaultScript())
		for {
			r, _ := p.request()
			switch r.Type {
			case CmdDisc:
				p.hangup()
				return
			case CmdRead:
				p.chunk(r.Cookie, ReplyFlagDone, ChunkOffsetData, p.u64(r.Offset), make([]byte, r.Length))
			default:
				p.simple(r.Cookie, 0, nil)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	second := s.start(t, c) // both on the first connection
	c.conns = append(c.conns, other.conns[0])
	if err := clientWaitErr(t, second); !errors.Is(err, ErrServerShutdown) {
		t.Fatalf("READ left unanswered: %v, want ErrServerShutdown", err)
	}
	s.disc(t)
	served, refused := 0, 0
	for i := range 4 {
		_, err := c.ReadAt(make([]byte, 512), int64(i)*512)
		switch {
		case err == nil:
			served++
		case errors.Is(err, ErrServerShutdown):
			refused++
		default:
			t.Errorf("READ %d: %v", i, err)
		}
	}
	if served != 2 || refused != 2 {
		t.Errorf("%d READs served and %d refused, want 2 and 2", served, refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Flush(ctx); !errors.Is(err, ErrServerShutdown) {
		t.Errorf("Flush: %v, want ErrServerShutdown", err)
	}
}
