package nbd

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// serverHeapBytes returns the bytes of live and not yet swept heap
// objects.
func serverHeapBytes() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Connections that each send only a WRITE header of 32 MiB and a little
// of its payload, then stall, keep the server's payload buffers under its
// budget, and the buffers go once they leave.
func TestServerBudgetBoundsStalledWrites(t *testing.T) {
	const limit, conns, length = 64 << 20, 40, 32 << 20
	s := &Server{BufferMemory: limit, Exports: []Export{{Backend: NewMemDisk(64 << 20)}}}
	path := serverTestStart(t, s)
	heap0 := serverHeapBytes()
	var wg sync.WaitGroup
	clients := make([]*serverRawClient, conns)
	for i := range clients {
		c := serverTestDial(t, path)
		c.negotiate("", false, false)
		clients[i] = c
		var h [RequestSize]byte
		(&Request{Type: CmdWrite, Cookie: 1, Length: length}).Put(&h)
		wg.Add(1)
		go func() { // a server waiting for its budget does not read
			defer wg.Done()
			c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
			c.nc.Write(append(h[:], make([]byte, 256<<10)...))
		}()
	}
	// Two requests of 32 MiB fit the budget; the others wait.
	deadline := time.Now().Add(10 * time.Second)
	for s.BufferStats().Reserved < limit {
		if time.Now().After(deadline) {
			t.Fatalf("reservations never reached the budget: %+v", s.BufferStats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 20 {
		st := s.BufferStats()
		if st.Reserved > st.Limit || st.Allocated > st.Limit {
			t.Fatalf("buffers past the budget: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Loosely: the process holds the budget at most, not conns x 32 MiB.
	if grown := serverHeapBytes() - heap0; grown > limit+16<<20 {
		t.Fatalf("heap grew by %d MiB with %d stalled 32 MiB writes, budget %d MiB", grown>>20, conns, limit>>20)
	}
	wg.Wait()
	for _, c := range clients {
		c.nc.Close()
	}
	deadline = time.Now().Add(10 * time.Second)
	for st := s.BufferStats(); st.Reserved != 0 || st.Allocated != 0; st = s.BufferStats() {
		if time.Now().After(deadline) {
			t.Fatalf("buffers not let go after the clients left: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if grown := serverHeapBytes() - heap0; grown > 16<<20 {
		t.Fatalf("heap %d MiB above where it started after the clients left", grown>>20)
	}
}

// A reservation past the budget waits, calling its hook first, until
// another ends; the context ends the wait.
func TestServerBudgetWaits(t *testing.T) {
	b := &serverBudget{bufs: newServerBuffers(), limit: 2 * serverLargeBuf}
	ctx := context.Background()
	if err := b.reserve(ctx, 2*serverLargeBuf, nil); err != nil {
		t.Fatal(err)
	}
	hooked := make(chan struct{})
	done := make(chan error)
	go func() { done <- b.reserve(ctx, serverLargeBuf, func() { close(hooked) }) }()
	<-hooked
	select {
	case err := <-done:
		t.Fatalf("a reservation past the budget returned %v at once", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.unreserve(serverLargeBuf)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- b.reserve(cctx, serverLargeBuf, nil) }()
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("reserve after cancel: %v", err)
	}
	b.unreserve(2 * serverLargeBuf)
	if b.reserved != 0 {
		t.Fatalf("%d bytes still reserved", b.reserved)
	}
	if got := serverNeed(1); got != serverSmallBuf {
		t.Fatalf("serverNeed(1) = %d", got)
	}
	if got := serverNeed(serverSmallBuf + 1); got != serverLargeBuf {
		t.Fatalf("serverNeed(64 KiB + 1) = %d", got)
	}
	if got := serverNeed(32<<20 + 1); got != 33<<20 {
		t.Fatalf("serverNeed(32 MiB + 1) = %d", got)
	}
}
