package nbd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// serverGateDisk is a MemDisk whose writes at gateOff wait for release,
// and which counts its flushes.
type serverGateDisk struct {
	*MemDisk
	serverNotLender
	gateOff int64
	entered chan struct{}
	release chan struct{}
	flushes atomic.Int64
}

func (d *serverGateDisk) WriteAt(p []byte, off int64) (int, error) {
	if off == d.gateOff {
		d.entered <- struct{}{}
		<-d.release
	}
	return d.MemDisk.WriteAt(p, off)
}

func (d *serverGateDisk) Flush(ctx context.Context) error {
	d.flushes.Add(1)
	return nil
}

func newServerGateDisk(gateOff int64) *serverGateDisk {
	return &serverGateDisk{MemDisk: NewMemDisk(1 << 20), gateOff: gateOff, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

// Requests the server had buffered but not started when Shutdown began
// are answered NBD_ESHUTDOWN; the one in progress finishes and is
// acknowledged, and the export is flushed.
func TestServerShutdownAnswersESHUTDOWN(t *testing.T) {
	d := newServerGateDisk(4096)
	s := &Server{MaxInFlight: 1, Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	var burst []byte
	var h [RequestSize]byte
	(&Request{Type: CmdWrite, Cookie: 1, Offset: 4096, Length: 512}).Put(&h)
	burst = append(append(burst, h[:]...), make([]byte, 512)...)
	for i := range 4 {
		(&Request{Type: CmdRead, Cookie: uint64(2 + i), Length: 512}).Put(&h)
		burst = append(burst, h[:]...)
	}
	c.write(burst) // in one piece: the server buffers the reads behind the write
	<-d.entered
	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	for !s.inShutdown.Load() {
		time.Sleep(time.Millisecond)
	}
	close(d.release)
	for i := range 5 {
		r, _ := c.simple(0)
		want := ESHUTDOWN
		if r.Cookie == 1 {
			want = 0
		}
		if r.Error != want {
			t.Fatalf("reply %d, cookie %d: error %v, want %v", i, r.Cookie, r.Error, want)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d.flushes.Load() == 0 {
		t.Fatal("Shutdown did not flush")
	}
}

// When the grace period runs out (a request that never finishes), Shutdown
// still flushes what was acknowledged before it returns.
func TestServerShutdownFlushesWhenGraceRunsOut(t *testing.T) {
	d := newServerGateDisk(8192)
	defer close(d.release)
	s := &Server{Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	c.request(CmdWrite, 0, 1, 0, 512, make([]byte, 512))
	if r, _ := c.simple(0); r.Error != 0 {
		t.Fatalf("write: %v", r.Error)
	}
	c.request(CmdWrite, 0, 2, 8192, 512, make([]byte, 512)) // never finishes
	<-d.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline", err)
	}
	if d.flushes.Load() == 0 {
		t.Fatal("Shutdown gave up without flushing the acknowledged write")
	}
}
