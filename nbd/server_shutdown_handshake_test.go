package nbd

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// serverStartShutdown begins s.Shutdown in the background once the
// server is in shutdown, and returns Shutdown's result channel.
func serverStartShutdown(t *testing.T, s *Server) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	for !s.inShutdown.Load() {
		time.Sleep(time.Millisecond)
	}
	return done
}

// Issue 17 item 9: a handshake in progress when the server shuts down
// gets NBD_REP_ERR_SHUTDOWN for its next options (proto.md: SHOULD, other
// than NBD_OPT_ABORT), and its ABORT is acknowledged as ever.
func TestServerShutdownRepliesErrShutdown(t *testing.T) {
	s := &Server{Exports: []Export{{Name: "d", Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	if rs := c.opt(OptInfo, AppendInfoRequest(nil, &InfoRequest{Name: "d"})); rs[len(rs)-1].typ != RepAck {
		t.Fatalf("INFO before shutdown: %+v", rs)
	}
	done := serverStartShutdown(t, s)
	for _, o := range []OptionCode{OptGo, OptList, OptStructuredReply, OptionCode(99)} {
		data := []byte(nil)
		if o == OptGo {
			data = AppendInfoRequest(nil, &InfoRequest{Name: "d"})
		}
		if rs := c.opt(o, data); len(rs) != 1 || rs[0].typ != RepErrShutdown {
			t.Fatalf("%v during shutdown: %+v, want ERR_SHUTDOWN", o, rs)
		}
	}
	if rs := c.opt(OptAbort, nil); rs[0].typ != RepAck {
		t.Fatalf("ABORT during shutdown: %v", rs[0].typ)
	}
	if b, err := io.ReadAll(c.nc); len(b) != 0 || err != nil {
		t.Fatalf("after ABORT: %q, %v; want a clean close", b, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// EXPORT_NAME cannot carry an error: during shutdown it gets a hang-up.
func TestServerShutdownExportNameHangsUp(t *testing.T) {
	s := &Server{Exports: []Export{{Backend: NewMemDisk(4096)}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	done := serverStartShutdown(t, s)
	c.sendOpt(OptExportName, nil)
	if b, err := io.ReadAll(c.nc); len(b) != 0 || err != nil {
		t.Fatalf("EXPORT_NAME during shutdown answered %q, %v; want a hang-up", b, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// The package's client, mid-negotiation when the server shuts down, sees
// ErrOptShutdown from its next option.
func TestServerShutdownNegotiatorSeesErrShutdown(t *testing.T) {
	s := &Server{Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Negotiate(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.List(ctx); err != nil {
		t.Fatal(err)
	}
	done := serverStartShutdown(t, s)
	if _, err := n.Go(ctx, ""); !errors.Is(err, ErrOptShutdown) {
		t.Fatalf("GO during shutdown: %v, want ErrOptShutdown", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// A client that stays silent in the handshake holds Shutdown up for no
// longer than the grace, not for the whole handshake timeout.
func TestServerShutdownSilentHandshake(t *testing.T) {
	s := &Server{HandshakeTimeout: time.Hour, Exports: []Export{{Backend: NewMemDisk(4096)}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	// A second one that has not even read the greeting.
	serverTestDial(t, path)
	serverWaitConns(t, s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*serverShutdownOptionGrace)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with silent handshakes: %v", err)
	}
	if n, err := c.nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("silent handshake survived Shutdown: %d, %v", n, err)
	}
}
