package nbd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverTestSockets opens n raw connections to path that each run
// behave, and closes them when the test ends.
func serverTestSockets(t *testing.T, path string, n int, behave func(net.Conn)) {
	t.Helper()
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, n)
	for range n {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		if behave != nil {
			wg.Add(1)
			go func() { defer wg.Done(); behave(nc) }()
		}
	}
	t.Cleanup(func() {
		for _, nc := range conns {
			nc.Close()
		}
		wg.Wait()
	})
}

// A well-behaved client is served within a second while hundreds of
// other sockets are silent, drip their handshake a byte at a time, or
// sit idle in transmission.
func TestServerNoLockOut(t *testing.T) {
	const dripping, idle = 100, 16
	// 2,000 silent sockets, two descriptors each in this process, fewer
	// if the descriptor limit is low.
	silent := 2000
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 2*2000+1000 {
		silent = max(100, (int(lim.Cur)-1000)/2)
	}
	d := NewMemDisk(1 << 20)
	s := &Server{MaxConns: 2 * idle, MaxHandshakes: 64, Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	for range idle {
		serverTestDial(t, path).negotiate("", true, false)
	}
	serverTestSockets(t, path, dripping, func(nc net.Conn) {
		hello := binary32(uint32(ClientFixedNewstyle))
		for _, b := range append(hello, bytes.Repeat([]byte{0x49}, 64)...) {
			if _, err := nc.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	serverTestSockets(t, path, silent, nil)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := Dial(ctx, "nbd+unix:///?socket="+path)
	if err != nil {
		t.Fatalf("Dial after %v: %v", time.Since(start), err)
	}
	defer c.Close()
	if _, err := c.WriteAt([]byte("served"), 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := c.ReadAt(got, 0); err != nil || string(got) != "served" {
		t.Fatalf("ReadAt: %q, %v", got, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("served after %v, want within a second", took)
	}
}

// serverWaitSessions waits until s counts want sessions (a session counts
// once its handshake has handed over to transmission).
func serverWaitSessions(t *testing.T, s *Server, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := s.sessions
		s.mu.Unlock()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, want %d", n, want)
		}
	}
}

// When MaxHandshakes connections are haggling, a new one pushes out the
// oldest and is served.
func TestServerHandshakePushOut(t *testing.T) {
	s := &Server{MaxHandshakes: 2, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	a, b := serverTestDial(t, path), serverTestDial(t, path)
	a.read(18)
	b.read(18)
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	serverHealthCheck(t, c, 1)
	a.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("oldest handshake: %v, want EOF", err)
	}
	b.write(binary32(uint32(ClientFixedNewstyle))) // its greeting was read
	if rs := b.opt(OptList, nil); rs[len(rs)-1].typ != RepAck {
		t.Fatalf("second handshake: %v", rs[len(rs)-1].typ)
	}
}

func binary32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// A connection accepted while MaxConns sessions are served is told why
// it is refused: NBD_REP_ERR_SHUTDOWN with a message, then an ACK to its
// NBD_OPT_ABORT. Refusals are logged at a bounded rate, with a count.
func TestServerRefusesWithReason(t *testing.T) {
	var log bytes.Buffer
	var lmu sync.Mutex
	s := &Server{MaxConns: 2, Exports: []Export{{Backend: NewMemDisk(1 << 20)}},
		Logger: slog.New(slog.NewTextHandler(&serverLockedWriter{w: &log, mu: &lmu}, nil))}
	path := serverTestStart(t, s)
	for range 2 {
		serverTestDial(t, path).negotiate("", false, false)
	}
	serverWaitSessions(t, s, 2)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{}))
	if r := rs[len(rs)-1]; r.typ != RepErrShutdown || !strings.Contains(string(r.data), "full") {
		t.Fatalf("GO on a full server: %v %q, want ERR_SHUTDOWN saying it is full", r.typ, r.data)
	}
	if rs := c.opt(OptAbort, nil); rs[0].typ != RepAck {
		t.Fatalf("ABORT: %v, want ACK", rs[0].typ)
	}
	if _, err := c.nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after ABORT: %v, want EOF", err)
	}
	// A burst of refusals: a line or two, with the count.
	for range 50 {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	time.Sleep(50 * time.Millisecond)
	lmu.Lock()
	defer lmu.Unlock()
	lines := strings.Count(log.String(), "connections refused")
	if lines == 0 || lines > 2 || !strings.Contains(log.String(), "count=") {
		t.Fatalf("51 refusals logged in %d lines:\n%s", lines, log.String())
	}
}

type serverLockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *serverLockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// IdleTimeout ends a session that sends nothing, not one that keeps
// sending requests.
func TestServerIdleTimeout(t *testing.T) {
	// Long enough that a loaded machine (CI runs everything under -race)
	// does not stretch the busy session's gaps past it.
	const idle = time.Second
	s := &Server{IdleTimeout: idle, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	quiet := serverTestDial(t, path)
	quiet.negotiate("", false, false)
	busy := serverTestDial(t, path)
	busy.negotiate("", false, false)
	start := time.Now()
	for i := range 8 {
		busy.request(CmdRead, 0, uint64(i), 0, 512, nil)
		if r, _ := busy.simple(512); r.Error != 0 {
			t.Fatalf("read: %v", r.Error)
		}
		time.Sleep(idle / 10)
	}
	quiet.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := quiet.nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle session after %v: %v, want EOF", time.Since(start), err)
	}
	busy.request(CmdRead, 0, 99, 0, 512, nil)
	if r, _ := busy.simple(512); r.Error != 0 {
		t.Fatalf("busy session: %v", r.Error)
	}
}
