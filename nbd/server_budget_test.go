package nbd

import (
	"bytes"
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

// serverStallWrites opens n sessions that each send a WRITE header of
// length bytes and then sent bytes of its payload, and stall.
func serverStallWrites(t *testing.T, path string, n int, length uint32, sent int) []*serverRawClient {
	t.Helper()
	clients := make([]*serverRawClient, n)
	for i := range clients {
		c := serverTestDial(t, path)
		c.negotiate("", false, false)
		var h [RequestSize]byte
		(&Request{Type: CmdWrite, Cookie: 1, Length: length}).Put(&h)
		c.write(append(h[:], make([]byte, sent)...))
		clients[i] = c
	}
	return clients
}

// serverWaitReserved waits until s's reservations reach want.
func serverWaitReserved(t *testing.T, s *Server, want int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.BufferStats().Reserved < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("reservations never reached %d: %+v", want, s.BufferStats())
		}
	}
}

// A write takes its budget as its payload arrives: connections that send
// only a WRITE header of 32 MiB hold none, those that send a little of
// the payload and stall hold what that little takes (a 1 MiB buffer, or
// on a PageTaker a group of pages as large), and an honest client's 32 MiB
// write is served meanwhile; the buffers go once they leave.
func TestServerBudgetBoundsStalledWrites(t *testing.T) {
	t.Run("buffers", func(t *testing.T) {
		serverBudgetStalledWrites(t, serverCopiedDisk{MemDisk: NewMemDisk(64 << 20)})
	})
	t.Run("pages", func(t *testing.T) {
		serverBudgetStalledWrites(t, NewMemDisk(64<<20))
	})
}

// serverBudgetStalledWrites runs TestServerBudgetBoundsStalledWrites on
// backend.
func serverBudgetStalledWrites(t *testing.T, backend Backend) {
	const limit, headers, partial, length, sent, each = 64 << 20, 200, 40, 32 << 20, 256 << 10, serverLargeBuf
	s := &Server{BufferMemory: limit, Exports: []Export{{Backend: backend}}}
	path := serverTestStart(t, s)
	heap0 := serverHeapBytes()
	clients := serverStallWrites(t, path, headers, length, 0)
	clients = append(clients, serverStallWrites(t, path, partial, length, sent)...)
	serverWaitReserved(t, s, partial*each)
	for range 20 {
		if st := s.BufferStats(); st.Reserved > partial*each || st.Allocated > st.Limit {
			t.Fatalf("%d stalled writers with a little payload and %d with none hold %+v, want %d bytes each at most", partial, headers, st, each)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Loosely: besides the buffers, each session has its read buffer and
	// slots (well under 256 KiB).
	if grown := serverHeapBytes() - heap0; grown > partial*each+(headers+partial)*256<<10+16<<20 {
		t.Fatalf("heap grew by %d MiB with %d stalled 32 MiB writes", grown>>20, headers+partial)
	}

	honest := serverTestDial(t, path)
	honest.negotiate("", false, false)
	honest.nc.SetDeadline(time.Now().Add(10 * time.Second))
	data := bytes.Repeat([]byte("honest"), length/6)
	honest.request(CmdWrite, 0, 9, 0, uint32(len(data)), data)
	if r, _ := honest.simple(0); r.Error != 0 || r.Cookie != 9 {
		t.Fatalf("honest write beside stalled ones: %+v", r)
	}
	honest.request(CmdRead, 0, 10, 0, uint32(len(data)), nil)
	if r, got := honest.simple(len(data)); r.Error != 0 || !bytes.Equal(got, data) {
		t.Fatalf("honest read back: %+v", r)
	}

	for _, c := range append(clients, honest) {
		c.nc.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := s.BufferStats(); st.Reserved != 0 || st.Allocated != 0; st = s.BufferStats() {
		if time.Now().After(deadline) {
			t.Fatalf("buffers not let go after the clients left: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if grown := serverHeapBytes() - heap0; grown > length+16<<20 { // the disk holds the honest write
		t.Fatalf("heap %d MiB above where it started after the clients left", grown>>20)
	}
}

// Many large writes at once under a budget that holds one of them all
// complete: writers holding part of their buffers do not wait on each
// other for ever, and the buffers never pass the budget by more than one
// request's. With shares (the default), a session's writes wait for each
// other and sessions compete for the budget; without, every write does.
func TestServerBudgetManyWritersComplete(t *testing.T) {
	t.Run("shares", func(t *testing.T) { serverBudgetManyWriters(t, 0) })
	t.Run("no shares", func(t *testing.T) { serverBudgetManyWriters(t, -1) })
}

// serverBudgetManyWriters runs TestServerBudgetManyWritersComplete with
// Server.ConnBufferMemory share.
func serverBudgetManyWriters(t *testing.T, share int64) {
	const payload, limit, clients, writers = 4 << 20, 4 << 20, 8, 4
	d := NewMemDisk(clients * writers * payload)
	s := &Server{BufferMemory: limit, ConnBufferMemory: share, MaxPayload: payload, Exports: []Export{{Backend: d}}}
	path := serverTestStart(t, s)
	stop := make(chan struct{})
	var worst BufferStats
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			st := s.BufferStats()
			worst.Reserved = max(worst.Reserved, st.Reserved)
			worst.Allocated = max(worst.Allocated, st.Allocated)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients*writers)
	for i := range clients {
		c, err := Dial(ctx, "nbd+unix:///?socket="+path, WithConnections(1))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for j := range writers {
			wg.Go(func() {
				off := int64(i*writers+j) * payload
				p := bytes.Repeat([]byte{byte(i*writers + j + 1)}, payload)
				for range 3 {
					if err := c.Pwrite(ctx, p, off, 0); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range clients * writers {
		got := make([]byte, payload)
		d.ReadAt(got, int64(k)*payload)
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(k + 1)}, payload)) {
			t.Fatalf("region %d not written", k)
		}
	}
	if bound := int64(limit + serverNeed(payload)); worst.Reserved > bound || worst.Allocated > bound {
		t.Fatalf("buffers reached %+v, past the budget plus one request (%d)", worst, bound)
	}
	if st := s.BufferStats(); st.Reserved != 0 {
		t.Fatalf("%d bytes still reserved with every write answered", st.Reserved)
	}
}

// A reservation past the budget waits, calling its hook first, until
// another ends; the context ends the wait.
func TestServerBudgetWaits(t *testing.T) {
	b := &serverBudget{bufs: newServerBuffers(), limit: 2 * serverLargeBuf}
	ctx := context.Background()
	var first, second, third uint64
	if err := b.reserve(ctx, 2*serverLargeBuf, &first, nil); err != nil {
		t.Fatal(err)
	}
	hooked := make(chan struct{})
	done := make(chan error)
	go func() { done <- b.reserve(ctx, serverLargeBuf, &second, func() { close(hooked) }) }()
	<-hooked
	select {
	case err := <-done:
		t.Fatalf("a reservation past the budget returned %v at once", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.unreserve(serverLargeBuf, new(uint64)) // part of first's reservation ends
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.unreserve(serverLargeBuf, &first)
	b.unreserve(serverLargeBuf, &second)
	b.mu.Lock()
	cctx, cancel := context.WithCancel(ctx)
	b.reserved = 2 * serverLargeBuf
	b.priv = 99 // another request is privileged: this one waits
	b.mu.Unlock()
	go func() { done <- b.reserve(cctx, serverLargeBuf, &third, nil) }()
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("reserve after cancel: %v", err)
	}
	if len(b.queue) != 0 {
		t.Fatalf("a canceled reservation still waits: %v", b.queue)
	}
	b.priv = 0
	b.reserved = 0
	if b.reserved != 0 {
		t.Fatalf("%d bytes still reserved", b.reserved)
	}
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

// Requests that each hold part of the budget and wait for more do not
// wait for ever: the one that has waited longest may pass the limit by
// up to extra, and the others wait until its reservation ends.
func TestServerBudgetOldestWaiterGoesPast(t *testing.T) {
	b := &serverBudget{bufs: newServerBuffers(), limit: 2 * serverLargeBuf, extra: 2 * serverLargeBuf}
	ctx := context.Background()
	var a, c uint64
	for _, tk := range []*uint64{&a, &c} {
		if err := b.reserve(ctx, serverLargeBuf, tk, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The budget is full; a asks first and passes it; c waits.
	if err := b.reserve(ctx, serverLargeBuf, &a, nil); err != nil {
		t.Fatal(err)
	}
	if b.reserved != 3*serverLargeBuf || b.priv != a {
		t.Fatalf("reserved %d, privileged %d (a is %d)", b.reserved, b.priv, a)
	}
	done := make(chan error)
	go func() { done <- b.reserve(ctx, serverLargeBuf, &c, nil) }()
	select {
	case err := <-done:
		t.Fatalf("a second request past the budget returned %v at once", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.unreserve(2*serverLargeBuf, &a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.priv != 0 && b.priv != c {
		t.Fatalf("privilege %d outlived its request", b.priv)
	}
	b.unreserve(2*serverLargeBuf, &c)
	if b.reserved != 0 || b.priv != 0 || len(b.queue) != 0 || a != 0 || c != 0 {
		t.Fatalf("after every reservation ended: reserved %d, privileged %d, queue %v, tickets %d %d", b.reserved, b.priv, b.queue, a, c)
	}
	// The privileged request itself is bounded by extra.
	var big uint64
	b.reserved = 2 * serverLargeBuf
	go func() { done <- b.reserve(ctx, 3*serverLargeBuf, &big, nil) }()
	select {
	case err := <-done:
		t.Fatalf("a request past the budget by more than extra returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.unreserve(serverLargeBuf, new(uint64))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
