//go:build !race

package nbd

import (
	"context"
	"errors"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
)

// ReadAt and WriteAt allocate nothing in steady state (the race detector
// allocates on its own, hence the build tag). nbdkit serves, so every
// allocation counted is the client's.
func TestClientZeroAllocs(t *testing.T) {
	_, uri := clientNbdkit(t, "memory", "size=16M")
	c, err := Dial(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4096)
	big := make([]byte, 256<<10)
	for name, f := range map[string]func(){
		"ReadAt 4K":   func() { _, err = c.ReadAt(buf, 8192) },
		"WriteAt 4K":  func() { _, err = c.WriteAt(buf, 8192) },
		"ReadAt 256K": func() { _, err = c.ReadAt(big, 1<<20) },
		"WriteAt 256K": func() {
			_, err = c.WriteAt(big, 1<<20)
		},
		"Pread": func() { err = c.Pread(context.Background(), buf, 0, 0) },
		"StartRead+StartWrite, Wait": func() {
			ctx := context.Background()
			r, e1 := c.StartRead(ctx, buf, 8192, 0)
			w, e2 := c.StartWrite(ctx, big[:65536], 1<<20, 0)
			err = errors.Join(e1, e2, w.Wait(ctx), r.Wait(ctx))
		},
	} {
		f() // warm up: buffers of the runtime's poller
		if n := allocs.PerRun(1000, f); n > allocs.Slack || err != nil {
			t.Errorf("%s: %v allocations per call, err %v", name, n, err)
		}
	}
}

// Reads and writes split over a small maximum payload allocate nothing
// either.
func TestClientZeroAllocsSplit(t *testing.T) {
	_, uri := clientNbdkit(t, "--filter=blocksize-policy", "memory", "size=16M",
		"blocksize-minimum=512", "blocksize-preferred=4096", "blocksize-maximum=65536")
	c, err := Dial(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, mx := c.BlockSize(); mx != 65536 {
		t.Fatalf("maximum payload %d", mx)
	}
	big := make([]byte, 1<<20)
	for name, f := range map[string]func(){
		"ReadAt 1M":  func() { _, err = c.ReadAt(big, 0) },
		"WriteAt 1M": func() { _, err = c.WriteAt(big, 0) },
	} {
		f()
		if n := allocs.PerRun(1000, f); n > allocs.Slack || err != nil {
			t.Errorf("%s: %v allocations per call, err %v", name, n, err)
		}
	}
}

// Our client against our server with requests in flight together, so that
// replies finished at once go out in one writev: nothing allocates on
// either side (allocs.PerRun counts every goroutine).
func TestServerClientZeroAllocsInFlight(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "z", Backend: NewMemDisk(4 << 20)}}})
	ctx := context.Background()
	c, err := Dial(ctx, serverTestURI(path, "z"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bufs := [4][]byte{make([]byte, 32<<10), make([]byte, 32<<10), make([]byte, 32<<10), make([]byte, 32<<10)}
	var calls [4]Call
	for name, write := range map[string]bool{"writes": true, "reads": false} {
		f := func() {
			for i := range calls {
				if write {
					calls[i], err = c.StartWrite(ctx, bufs[i], int64(i)<<15, 0)
				} else {
					calls[i], err = c.StartRead(ctx, bufs[i], int64(i)<<15, 0)
				}
				if err != nil {
					return
				}
			}
			for i := range calls {
				if e := calls[i].Wait(ctx); e != nil {
					err = e
				}
			}
		}
		for range 50 {
			f() // warm up: the server's buffers and batch slices grow to size
		}
		if n := allocs.PerRun(1000, f); n > allocs.Slack || err != nil {
			t.Errorf("%s: %v allocations per 4 requests in flight, err %v", name, n, err)
		}
	}
}
