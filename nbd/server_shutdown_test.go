package nbd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// serverVolatileDisk is a disk with a volatile write cache: writes land in
// cache and only Flush copies them to durable. A write acknowledged and
// never flushed is lost if the machine dies; Shutdown must flush.
type serverVolatileDisk struct {
	cache, durable *MemDisk
	delay          time.Duration
	mu             sync.Mutex
	dirty          [][2]int64
}

func (d *serverVolatileDisk) Size() int64 { return d.cache.Size() }
func (d *serverVolatileDisk) ReadAt(p []byte, off int64) (int, error) {
	return d.cache.ReadAt(p, off)
}

func (d *serverVolatileDisk) WriteAt(p []byte, off int64) (int, error) {
	time.Sleep(d.delay)
	n, err := d.cache.WriteAt(p, off)
	d.mu.Lock()
	d.dirty = append(d.dirty, [2]int64{off, int64(n)})
	d.mu.Unlock()
	return n, err
}

func (d *serverVolatileDisk) Flush(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.dirty {
		b := make([]byte, r[1])
		d.cache.ReadAt(b, r[0])
		d.durable.WriteAt(b, r[0])
	}
	d.dirty = nil
	return nil
}

// Writes acknowledged before Shutdown are all durable after it, while
// several clients keep many writes in flight.
func TestServerShutdownKeepsAcknowledgedWrites(t *testing.T) {
	const size = 4 << 20
	d := &serverVolatileDisk{cache: NewMemDisk(size), durable: NewMemDisk(size), delay: 200 * time.Microsecond}
	s := &Server{MaxInFlight: 8, Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)

	type acked struct {
		off  uint64
		data []byte
	}
	var mu sync.Mutex
	var done []acked
	var wg sync.WaitGroup
	const clients, block = 4, 4096
	for g := range clients {
		c := serverTestDial(t, path)
		c.negotiate("", g%2 == 0, false)
		wg.Add(2)
		var pmu sync.Mutex
		pending := map[uint64]acked{}
		window := make(chan struct{}, 32)
		stop := make(chan struct{})
		go func() { // writer: pipelines writes until the server hangs up
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case window <- struct{}{}:
				case <-stop:
					return
				}
				off := uint64(g*size/clients + (i%(size/clients/block))*block)
				data := bytes.Repeat([]byte{byte(g*31 + i)}, block)
				pmu.Lock()
				pending[uint64(i)] = acked{off, data}
				pmu.Unlock()
				var h [RequestSize]byte
				(&Request{Type: CmdWrite, Cookie: uint64(i), Offset: off, Length: block}).Put(&h)
				if _, err := c.nc.Write(append(h[:], data...)); err != nil {
					return
				}
			}
		}()
		go func() { // reader: records what the server acknowledged
			defer wg.Done()
			defer close(stop)
			for {
				cookie, e, err := serverTestWriteReply(c)
				if err != nil {
					c.nc.Close()
					return
				}
				// Writes the server had buffered when Shutdown began are
				// refused, not acknowledged.
				if e != 0 && e != ESHUTDOWN {
					t.Errorf("reply to %d: %v", cookie, e)
					return
				}
				pmu.Lock()
				a, ok := pending[cookie]
				delete(pending, cookie)
				pmu.Unlock()
				if !ok {
					t.Errorf("reply for unknown cookie %d", cookie)
					return
				}
				if e == 0 {
					mu.Lock()
					done = append(done, a)
					mu.Unlock()
				}
				<-window
			}
		}()
	}
	time.Sleep(150 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(done) < clients*4 {
		t.Fatalf("only %d writes acknowledged; the test proves nothing", len(done))
	}
	// Later writes to the same offset win: check the last acknowledged.
	last := map[uint64][]byte{}
	for _, a := range done {
		last[a.off] = a.data
	}
	got := make([]byte, block)
	for off, want := range last {
		d.durable.ReadAt(got, int64(off))
		if !bytes.Equal(got, want) {
			t.Fatalf("acknowledged write at %d is not durable after Shutdown", off)
		}
	}
	t.Logf("%d writes acknowledged, all durable", len(done))
}

// serverStuckDisk never finishes a write until released.
type serverStuckDisk struct {
	*MemDisk
	release chan struct{}
	started chan struct{}
}

func (d *serverStuckDisk) WriteAt(p []byte, off int64) (int, error) {
	d.started <- struct{}{}
	<-d.release
	return d.MemDisk.WriteAt(p, off)
}

// Shutdown gives up when its context ends, closing everything; Serve
// returns ErrServerClosed; a new Serve is refused.
func TestServerShutdownDeadline(t *testing.T) {
	d := &serverStuckDisk{MemDisk: NewMemDisk(1 << 20), release: make(chan struct{}), started: make(chan struct{}, 1)}
	defer close(d.release)
	s := &Server{Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	c.request(CmdWrite, 0, 1, 0, 4, []byte("abcd"))
	<-d.started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	if n, err := c.nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("connection still open after Shutdown gave up: %d, %v", n, err)
	}
	l, err := net.Listen("unix", path+"2")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown = %v", err)
	}
}

// A connection still haggling is dropped by Shutdown at once.
func TestServerShutdownDuringHandshake(t *testing.T) {
	s := &Server{Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n, err := c.nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("handshaking connection survived Shutdown: %d, %v", n, err)
	}
}

// serverTestWriteReply reads the reply to a write, simple or (an error
// after structured replies were negotiated) a structured ERROR chunk.
func serverTestWriteReply(c *serverRawClient) (cookie uint64, e Errno, err error) {
	var b [ChunkHeaderSize]byte
	if _, err := io.ReadFull(c.nc, b[:SimpleReplySize]); err != nil {
		return 0, 0, err
	}
	var rep SimpleReply
	if rep.Parse((*[SimpleReplySize]byte)(b[:SimpleReplySize])) == nil {
		return rep.Cookie, rep.Error, nil
	}
	if _, err := io.ReadFull(c.nc, b[SimpleReplySize:]); err != nil {
		return 0, 0, err
	}
	var h ChunkHeader
	if err := h.Parse(&b); err != nil {
		return 0, 0, err
	}
	payload := make([]byte, h.Length)
	if _, err := io.ReadFull(c.nc, payload); err != nil {
		return 0, 0, err
	}
	ec, err := ParseErrorChunk(h.Type, payload)
	return h.Cookie, ec.Error, err
}
