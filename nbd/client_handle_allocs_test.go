//go:build !race

package nbd_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// StartReadAt, StartWriteAt and Wait allocate nothing in steady state
// (the in-process server included; the race detector allocates on its
// own, hence the build tag), with a context that never ends and with one
// that can: the connection keeps its registration with the latter from
// one request to the next.
func TestHandleZeroAllocs(t *testing.T) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), cancellable} {
		t.Run(fmt.Sprint(ctx), func(t *testing.T) { handleZeroAllocs(t, ctx) })
	}
}

func handleZeroAllocs(t *testing.T, ctx context.Context) {
	_, c := handleDial(t, []nbdtest.Option{nbdtest.WithSize(1 << 20)})
	buf := make([]byte, 32<<10)
	var err error
	f := func() {
		r, e1 := c.StartReadAt(ctx, buf[:16<<10], 0)
		w, e2 := c.StartWriteAt(ctx, buf[16<<10:], 64<<10)
		if e1 != nil || e2 != nil {
			err = e1
			if err == nil {
				err = e2
			}
			return
		}
		if err = c.Wait(ctx, w); err == nil {
			err = c.Wait(ctx, r)
		}
	}
	f() // warm up
	if n := allocs.PerRun(1000, f); n > allocs.Slack || err != nil {
		t.Errorf("%v allocations per read and write, err %v", n, err)
	}
}
