package nbd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/allocs"
)

// TestClientTimeout follows a WithRequestTimeout context through calls:
// its deadline ends it and cuts the read registered under it, a later
// call gets an open Done channel, and a callback of the timer that comes
// late, or after the call, ends nothing.
func TestClientTimeout(t *testing.T) {
	kicked := make(chan struct{}, 1)
	w := &clientWatch{kick: func() { kicked <- struct{}{} }}
	tm := newClientTimeout()
	tm.arm(20 * time.Millisecond)
	if d, ok := tm.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
		t.Fatalf("deadline %v, %v", d, ok)
	}
	if tm.Err() != nil {
		t.Fatal("ended at once")
	}
	if !w.begin(tm) {
		t.Fatal("a read under a request timeout not watched")
	}
	first := tm.Done()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline passed and Done is open")
	}
	select {
	case <-kicked:
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline passed during a read and did not cut it")
	}
	if !w.end() {
		t.Fatal("the cut not reported by end")
	}
	if !errors.Is(tm.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err %v after the deadline", tm.Err())
	}
	if len(tm.watches) != 0 {
		t.Fatalf("%d registrations left after the read", len(tm.watches))
	}
	tm.disarm()

	// The next call: a fresh Done channel, no end before its deadline,
	// even when the timer's callback runs early.
	tm.arm(time.Hour)
	if tm.Done() == first {
		t.Fatal("a closed Done channel used again")
	}
	w.begin(tm)
	tm.expire() // as a late callback of the call before would
	if tm.Err() != nil || len(kicked) != 0 {
		t.Fatal("a callback before the deadline ended the call")
	}
	if w.end() {
		t.Fatal("a cut reported with nothing ended")
	}
	open := tm.Done()
	tm.disarm()
	tm.arm(time.Hour)
	if tm.Done() != open {
		t.Fatal("an open Done channel replaced")
	}
	tm.disarm()
	tm.at = time.Now().Add(-time.Second) // as if it had passed while idle
	tm.expire()
	if tm.Err() != nil {
		t.Fatal("a callback after the call ended the context")
	}
}

// slowDisk is a memory disk whose reads at hold wait until release is
// closed. It wraps the disk rather than embedding it, so that the server
// does not go around ReadAt with the disk's Lend.
type slowDisk struct {
	d       *MemDisk
	hold    int64
	release chan struct{}
}

func (d *slowDisk) ReadAt(p []byte, off int64) (int, error) {
	if off == d.hold {
		<-d.release
	}
	return d.d.ReadAt(p, off)
}

func (d *slowDisk) WriteAt(p []byte, off int64) (int, error) { return d.d.WriteAt(p, off) }
func (d *slowDisk) Size() int64                              { return d.d.Size() }

// TestClientRequestTimeoutAgain: after a call bounded by
// WithRequestTimeout ends at its deadline, the connection lives and the
// calls after it, from several goroutines, each with a context used again
// from the client's free list, complete.
func TestClientRequestTimeoutAgain(t *testing.T) {
	disk := &slowDisk{d: NewMemDisk(1 << 20), hold: 4096, release: make(chan struct{})}
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "t", Backend: disk}}})
	c, err := Dial(context.Background(), serverTestURI(path, "t"), WithRequestTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	if _, err := c.ReadAt(buf, disk.hold); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held read: %v, want context.DeadlineExceeded", err)
	}
	close(disk.release)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for i := range 200 {
				off := int64((g*200+i)%256) * 4096
				if _, err := c.WriteAt(p, off); err != nil {
					errs <- err
					return
				}
				if _, err := c.ReadAt(p, off); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a call after the timed-out one: %v", err)
	}
}

// TestClientRequestTimeoutZeroAllocs: ReadAt and WriteAt bounded by
// WithRequestTimeout allocate nothing, on either side.
func TestClientRequestTimeoutZeroAllocs(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "z", Backend: NewMemDisk(1 << 20)}}})
	c, err := Dial(context.Background(), serverTestURI(path, "z"), WithRequestTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	for name, f := range map[string]func() error{
		"ReadAt":     func() error { _, err := c.ReadAt(buf, 0); return err },
		"WriteAt":    func() error { _, err := c.WriteAt(buf, 64<<10); return err },
		"WriteAtFUA": func() error { _, err := c.WriteAtFUA(buf[:4096], 0); return err },
	} {
		var err error
		g := func() {
			if e := f(); e != nil && err == nil {
				err = e
			}
		}
		g() // warm up
		if n := allocs.PerRun(1000, g); n > allocs.Slack || err != nil {
			t.Errorf("%s: %v allocations per call, err %v", name, n, err)
		}
	}
}
