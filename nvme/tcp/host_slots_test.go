package tcp

import (
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// Concurrent ReadAt and WriteAt calls larger than the largest transfer
// each need several of the queue's slots. A call must not hold some
// while it waits for more: with the slots spread over callers, each
// waiting for a slot, no one waits for a completion (which frees them)
// and every call hangs.
func TestConcurrentLargeIONoSlotDeadlock(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(8<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 4, KeepAlive: -1})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4*128<<10) // 4 commands of 128 KiB (MDTS 5)
			for range 100 {
				var err error
				if g%2 == 0 {
					_, err = h.ReadAt(buf, 0)
				} else {
					_, err = h.WriteAt(buf, int64(len(buf)))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // failure detector only
		t.Fatal("concurrent 512 KiB ReadAt and WriteAt calls on a 4-entry queue hung")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
