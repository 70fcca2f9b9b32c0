package nbd

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// clientDiscGate is the client's end of a connection that holds the
// NBD_CMD_DISC in its Write until released, and counts what goes out
// after it.
type clientDiscGate struct {
	net.Conn
	discing chan struct{} // closed when the DISC's Write begins
	release chan struct{} // the DISC's Write waits for it
	wrote   chan struct{} // closed by the first Write after the DISC

	mu    sync.Mutex
	disc  bool
	after int
}

func (g *clientDiscGate) Write(p []byte) (int, error) {
	var r Request
	if len(p) == RequestSize && r.Parse((*[RequestSize]byte)(p)) == nil && r.Type == CmdDisc {
		close(g.discing)
		<-g.release
		n, err := g.Conn.Write(p)
		g.mu.Lock()
		g.disc = true
		g.mu.Unlock()
		return n, err
	}
	g.mu.Lock()
	after := g.disc
	g.mu.Unlock()
	if after {
		defer func() {
			select {
			case <-g.wrote:
			default:
				close(g.wrote)
			}
		}()
	}
	n, err := g.Conn.Write(p)
	g.mu.Lock()
	if after {
		g.after += n
	}
	g.mu.Unlock()
	return n, err
}

// Close gives a writer that took the write lock after the DISC its chance
// to write before the connection goes: it waits for its Write, or half a
// second (with the write lock held until the connection is closed, none
// can come).
func (g *clientDiscGate) Close() error {
	select {
	case <-g.wrote:
	case <-time.After(500 * time.Millisecond):
	}
	return g.Conn.Close()
}

// proto.md, NBD_CMD_DISC: "A client MUST NOT send anything to the server
// after sending an NBD_CMD_DISC command." A request queued (by a caller
// already past Client.Close's check) while Close writes the DISC used to
// be written after it, in the moment between Close letting go of the
// write lock and closing the connection.
func TestClientNothingAfterDisc(t *testing.T) {
	cs, ss := net.Pipe()
	gate := &clientDiscGate{Conn: cs, discing: make(chan struct{}), release: make(chan struct{}), wrote: make(chan struct{})}
	after := make(chan int, 1)
	go func() {
		defer ss.Close()
		defer func() {
			if r := recover(); r != nil {
				after <- -1
			}
		}()
		p := &clientPeer{t: t, conn: ss}
		p.handshake(clientDefaultScript())
		r, _ := p.request()
		if r.Type != CmdDisc {
			t.Errorf("first request %v, want DISC", r.Type)
		}
		n, _ := io.Copy(io.Discard, ss)
		after <- int(n)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(ctx, gate)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.conns[0]
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	<-gate.discing // Close holds the write lock, writing the DISC
	s, err := cc.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- cc.start(ctx, s, CmdRead, 0, 0, 512, nil, make([]byte, 512)) }()
	for {
		cc.wmu.Lock()
		queued := len(cc.wq)
		cc.wmu.Unlock()
		if queued == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the READ never queued")
		}
		time.Sleep(time.Millisecond)
	}
	close(gate.release)
	<-closed
	if err := <-started; !errors.Is(err, ErrClosed) {
		t.Errorf("READ queued during Close: %v, want ErrClosed", err)
	}
	if n := <-after; n != 0 {
		t.Errorf("%d bytes sent after NBD_CMD_DISC", n)
	}
	gate.mu.Lock()
	n := gate.after
	gate.mu.Unlock()
	if n != 0 {
		t.Errorf("%d bytes written after NBD_CMD_DISC", n)
	}
}
