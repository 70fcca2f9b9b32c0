package tcp

import (
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// hold takes n free slots of queue i of h, as n commands in flight would,
// until the test ends.
func hold(t *testing.T, h *Host, i, n int) {
	q := h.io[i]
	taken := make([]uint16, n)
	for k := range taken {
		taken[k] = <-q.free
	}
	t.Cleanup(func() {
		for _, s := range taken {
			q.free <- s
		}
	})
}

// queueIndex returns the index of the I/O queue h.queue picks.
func queueIndex(h *Host) int {
	q := h.queue()
	for i, x := range h.io {
		if x == q {
			return i
		}
	}
	return -1
}

// With QueueFill 1 a command goes to the I/O queue with the most free
// slots; queues with as many share the commands.
func TestHostPicksFreestQueue(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 3, QueueDepth: 8, QueueFill: 1, KeepAlive: -1})
	if len(h.io) != 3 {
		t.Fatalf("%d I/O queues, want 3", len(h.io))
	}
	// All as free: each queue in turn.
	seen := map[int]int{}
	for range 30 {
		seen[queueIndex(h)]++
	}
	if seen[0] != 10 || seen[1] != 10 || seen[2] != 10 {
		t.Fatalf("equal queues picked %v times, want 10 each", seen)
	}
	// Queue 0 with 3 slots taken, queue 2 with 1: queue 1, always.
	hold(t, h, 0, 3)
	hold(t, h, 2, 1)
	for range 10 {
		if i := queueIndex(h); i != 1 {
			t.Fatalf("picked queue %d, want 1 (the freest)", i)
		}
	}
	// Queue 1 now as busy as queue 2: those two share, never queue 0.
	hold(t, h, 1, 1)
	seen = map[int]int{}
	for range 30 {
		seen[queueIndex(h)]++
	}
	if seen[0] != 0 || seen[1] < 10 || seen[2] < 10 {
		t.Fatalf("picked %v, want queues 1 and 2 about as often, never 0", seen)
	}
}

// By default a command goes to the first I/O queue with fewer than
// DefaultQueueFill commands in flight, in queue order; once each has that
// many, to the freest.
func TestHostFillsQueuesInOrder(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 3, QueueDepth: 64, KeepAlive: -1})
	if len(h.io) != 3 {
		t.Fatalf("%d I/O queues, want 3", len(h.io))
	}
	for k := range 3 * DefaultQueueFill {
		want := k / DefaultQueueFill
		if i := queueIndex(h); i != want {
			t.Fatalf("with %d commands in flight picked queue %d, want %d", k, i, want)
		}
		hold(t, h, want, 1)
	}
	hold(t, h, 1, 2) // queue 1 the fullest, 0 and 2 as free
	seen := map[int]int{}
	for range 30 {
		seen[queueIndex(h)]++
	}
	if seen[1] != 0 || seen[0] < 10 || seen[2] < 10 {
		t.Fatalf("every queue past the fill, picked %v, want queues 0 and 2 about as often, never 1", seen)
	}
}
