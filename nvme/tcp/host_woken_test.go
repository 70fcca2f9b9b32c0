package tcp

import (
	"sync"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// The count of callers a completion woke and that have not run yet (which
// makes a starting caller yield, so that commands posted together share a
// writev) goes back to zero once every caller has run: each wake it
// counts is taken back by the caller it woke, whatever the interleaving.
func TestHostWokenCountSettles(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(8<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 32})
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := range 200 {
				if _, err := h.ReadAt(buf, int64((g*200+i)%2048)*4096); err != nil {
					t.Errorf("read: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, q := range h.io {
		if n := q.woken.Load(); n != 0 {
			t.Errorf("queue %d: %d callers counted as woken after all ran", q.qid, n)
		}
	}
}
