package tcp

import (
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// A command goes to the I/O queue with the most free slots; queues with as
// many share the commands.
func TestHostPicksFreestQueue(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 3, QueueDepth: 8, KeepAlive: -1})
	if len(h.io) != 3 {
		t.Fatalf("%d I/O queues, want 3", len(h.io))
	}
	index := func(q *hostQueue) int {
		for i, x := range h.io {
			if x == q {
				return i
			}
		}
		return -1
	}
	// All as free: each queue in turn.
	seen := map[int]int{}
	for range 30 {
		seen[index(h.queue())]++
	}
	if seen[0] != 10 || seen[1] != 10 || seen[2] != 10 {
		t.Fatalf("equal queues picked %v times, want 10 each", seen)
	}
	// Queue 0 with 3 slots taken, queue 2 with 1: queue 1, always.
	held := map[int][]uint16{0: {<-h.io[0].free, <-h.io[0].free, <-h.io[0].free}, 2: {<-h.io[2].free}}
	for range 10 {
		if i := index(h.queue()); i != 1 {
			t.Fatalf("picked queue %d, want 1 (the freest)", i)
		}
	}
	// Queue 1 now as busy as queue 2: those two share, never queue 0.
	held[1] = []uint16{<-h.io[1].free}
	seen = map[int]int{}
	for range 30 {
		seen[index(h.queue())]++
	}
	if seen[0] != 0 || seen[1] < 10 || seen[2] < 10 {
		t.Fatalf("picked %v, want queues 1 and 2 about as often, never 0", seen)
	}
	for i, slots := range held {
		for _, s := range slots {
			h.io[i].free <- s
		}
	}
}
