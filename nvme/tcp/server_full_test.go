package tcp

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// A connection past MaxConns is refused with ErrServerFull (it was
// ErrServerClosed, on a server that was not closed), and served once a
// place is free; after Close it is ErrServerClosed.
func TestServerFull(t *testing.T) {
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20), BlockSize: 512}}}}}
	s := &Server{Fabric: f, MaxConns: 1}
	if err := s.init(); err != nil { // s.conns is made by init
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer b.Close()
	first := make(chan error, 1)
	go func() { first <- s.ServeConn(a) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first connection was not taken")
		}
		time.Sleep(time.Millisecond)
	}
	c, d := net.Pipe()
	defer d.Close()
	if err := s.ServeConn(c); !errors.Is(err, ErrServerFull) {
		t.Fatalf("ServeConn past MaxConns: %v, want ErrServerFull", err)
	}
	b.Close() // the host hangs up: the place is free again
	<-first
	e, g := net.Pipe()
	second := make(chan error, 1)
	go func() { second <- s.ServeConn(e) }()
	g.Close()
	if err := <-second; errors.Is(err, ErrServerFull) {
		t.Fatalf("ServeConn with a place free: %v", err)
	}
	s.Close()
	h, i := net.Pipe()
	defer i.Close()
	if err := s.ServeConn(h); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ServeConn after Close: %v, want ErrServerClosed", err)
	}
}

// A negative MaxConns is a configuration error, not a server that refuses
// every connection.
func TestServerNegativeMaxConns(t *testing.T) {
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20), BlockSize: 512}}}}}
	s := &Server{Fabric: f, MaxConns: -1}
	a, b := net.Pipe()
	defer b.Close()
	err := s.ServeConn(a)
	if err == nil || errors.Is(err, ErrServerFull) || errors.Is(err, ErrServerClosed) {
		t.Fatalf("ServeConn with MaxConns -1: %v, want a configuration error", err)
	}
}
