package nbd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// serverTestEOFs counts the connections that the server closes within
// wait.
func serverTestEOFs(cs []*serverRawClient, wait time.Duration) int {
	var n atomic.Int32
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			c.nc.SetReadDeadline(time.Now().Add(wait))
			if _, err := c.nc.Read(make([]byte, 1)); err == io.EOF {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

// At the default settings, MaxConns idle sessions and 2,000 silent or
// dripping sockets do not keep a well-behaved client from being served
// within a second: it takes the place of the session idle longest.
func TestServerEvictsIdleSessionUnderFlood(t *testing.T) {
	const dripping = 100
	silent := 2000
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < 2*(2000+DefaultMaxConns)+1000 {
		silent = max(100, (int(lim.Cur)-1000)/2-DefaultMaxConns)
	}
	s := &Server{Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	idle := make([]*serverRawClient, DefaultMaxConns)
	for i := range idle {
		idle[i] = serverTestDial(t, path)
		idle[i].negotiate("", true, false)
	}
	serverWaitSessions(t, s, DefaultMaxConns)
	allIdle := time.Now().Add(DefaultEvictIdleAfter)
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
	time.Sleep(time.Until(allIdle))

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
	if n := serverTestEOFs(idle, 500*time.Millisecond); n != 1 {
		t.Fatalf("%d idle sessions closed, want 1", n)
	}
	serverWaitSessions(t, s, DefaultMaxConns)
}

// serverHeldReadDisk is a Backend (only) over a MemDisk whose reads wait
// until gate is closed.
type serverHeldReadDisk struct {
	mem  *MemDisk
	gate chan struct{}
}

func (d *serverHeldReadDisk) ReadAt(p []byte, off int64) (int, error) {
	<-d.gate
	return d.mem.ReadAt(p, off)
}

func (d *serverHeldReadDisk) WriteAt(p []byte, off int64) (int, error) { return d.mem.WriteAt(p, off) }
func (d *serverHeldReadDisk) Size() int64                              { return d.mem.Size() }

// Only a session idle (nothing in flight) for EvictIdleAfter gives its
// place up; a full server with none refuses, with a reason. Eviction can
// be turned off.
func TestServerEvictionNeedsIdleness(t *testing.T) {
	const after = 300 * time.Millisecond
	d := &serverHeldReadDisk{mem: NewMemDisk(1 << 20), gate: make(chan struct{})}
	var log bytes.Buffer
	var lmu sync.Mutex
	s := &Server{MaxConns: 2, EvictIdleAfter: after, Exports: []Export{{Backend: d}},
		Logger: slog.New(slog.NewTextHandler(&serverLockedWriter{w: &log, mu: &lmu}, nil))}
	path := serverTestStart(t, s)
	quiet, busy := serverTestDial(t, path), serverTestDial(t, path)
	quiet.negotiate("", false, false)
	busy.negotiate("", false, false)
	serverWaitSessions(t, s, 2)
	busy.request(CmdRead, 0, 1, 0, 512, nil) // waits on the gate
	refused := func(what string) {
		t.Helper()
		c := serverTestDial(t, path)
		c.hello(ClientFixedNewstyle | ClientNoZeroes)
		rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{}))
		if r := rs[len(rs)-1]; r.typ != RepErrShutdown || !strings.Contains(string(r.data), "full") {
			t.Fatalf("%s: %v %q, want ERR_SHUTDOWN saying it is full", what, r.typ, r.data)
		}
	}
	refused("no session idle long enough")
	time.Sleep(after + 50*time.Millisecond)
	fresh := serverTestDial(t, path)
	fresh.negotiate("", false, false)
	fresh.request(CmdWrite, 0, 7, 0, 4, []byte("ok!!")) // reads wait on the gate
	if r, _ := fresh.simple(0); r.Error != 0 || r.Cookie != 7 {
		t.Fatalf("new session's write: %+v", r)
	}
	if n := serverTestEOFs([]*serverRawClient{quiet}, 2*time.Second); n != 1 {
		t.Fatal("the idle session was not closed")
	}
	lmu.Lock()
	logged := log.String()
	lmu.Unlock()
	if !strings.Contains(logged, "idle sessions closed") || !strings.Contains(logged, "count=1") {
		t.Fatalf("eviction not logged with a count:\n%s", logged)
	}
	refused("the busy session and a fresh one")
	close(d.gate)
	busy.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r, _ := busy.simple(512); r.Error != 0 || r.Cookie != 1 {
		t.Fatalf("busy session's read: %+v", r)
	}

	off := &Server{MaxConns: 1, EvictIdleAfter: -1, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path = serverTestStart(t, off)
	serverTestDial(t, path).negotiate("", false, false)
	serverWaitSessions(t, off, 1)
	time.Sleep(DefaultEvictIdleAfter + 50*time.Millisecond)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	if rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{})); rs[len(rs)-1].typ != RepErrShutdown {
		t.Fatalf("eviction disabled: %v, want ERR_SHUTDOWN", rs[len(rs)-1].typ)
	}
}
