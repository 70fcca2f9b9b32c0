package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// timeoutLog is a slog.Handler that reports, on its channel, each
// connection failure matching ErrReplyTimeout.
type timeoutLog struct{ timedOut chan error }

func (h timeoutLog) Enabled(context.Context, slog.Level) bool { return true }
func (h timeoutLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h timeoutLog) WithGroup(string) slog.Handler            { return h }
func (h timeoutLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, ErrReplyTimeout) {
			select {
			case h.timedOut <- err:
			default:
			}
		}
		return true
	})
	return nil
}

// stallReads has the I/O queue q, whose socket takes little, ask for n
// reads of 1 MiB and read nothing.
func stallReads(q *rawHost, n int) {
	q.t.Helper()
	q.nc.(*net.TCPConn).SetReadBuffer(4096)
	read := nvme.Command{Opcode: nvme.OpRead, NSID: 1, CDW12: 1<<20/512 - 1,
		SGL: nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: 1 << 20}}
	for i := range n {
		read.CID = uint16(i)
		q.capsule(read, nil)
	}
}

// connCount returns how many connections the server serves.
func connCount(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// A host that asks for large reads and never reads the data holds its
// queue (slots, the data lent, goroutines) while the target cannot
// write. ReplyTimeout closes that connection, with an error matching
// ErrReplyTimeout in the Logger's warning, and its goroutines end; the
// admin queue stays. (Before ReplyTimeout the writer waited for ever.)
func TestServerReplyTimeout(t *testing.T) {
	log := timeoutLog{make(chan error, 1)}
	s, addr := startServer(t, nbd.NewMemDisk(8<<20), 512, func(s *Server) {
		s.Fabric.MDTS = 8 // 1 MiB transfers: a C2HData is more than a window
		s.ReplyTimeout = 200 * time.Millisecond
		s.Logger = slog.New(log)
	})
	q := dialRawIO(t, addr, 0)
	stallReads(q, 32)
	select {
	case err := <-log.timedOut:
		t.Logf("the connection's error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a host that reads nothing kept its connection")
	}
	for deadline := time.Now().Add(5 * time.Second); connCount(s) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections served after the reply timeout, want the admin queue's alone", connCount(s))
		}
	}
}

// With ReplyTimeout negative a host that reads nothing keeps its
// connection, and Close still ends it at once.
func TestServerCloseStalledHost(t *testing.T) {
	s, addr := startServer(t, nbd.NewMemDisk(8<<20), 512, func(s *Server) {
		s.Fabric.MDTS = 8
		s.ReplyTimeout = -1
	})
	q := dialRawIO(t, addr, 0)
	stallReads(q, 32)
	time.Sleep(300 * time.Millisecond)
	if n := connCount(s); n != 2 {
		t.Fatalf("%d connections, want the admin queue's and the stalled one", n)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a host that reads nothing")
	}
}

// Batches past a window of the ReplyTimeout are written a window at a
// time, the windows cutting the data of a C2HData anywhere: with 1 MiB
// transfers, reads from a lending and a copying backend, digests on, every
// byte reads back as written.
func TestServerReplyWindows(t *testing.T) {
	const size = 16 << 20
	for _, lend := range []bool{true, false} {
		t.Run(fmt.Sprintf("lent %v", lend), func(t *testing.T) {
			mem := nbd.NewMemDisk(size)
			var disk nbd.Backend = mem
			if !lend {
				disk = &copyingDisk{MemDisk: mem}
			}
			_, addr := startServer(t, disk, 512, func(s *Server) { s.Fabric.MDTS = 8 })
			h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16, HeaderDigest: true, DataDigest: true})
			model := make([]byte, size)
			for i := range model {
				model[i] = byte(i*7 + i>>13)
			}
			if _, err := mem.WriteAt(model, 0); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, size)
			var wg sync.WaitGroup
			for k := range 4 { // a quarter each, at once: batches of several reads
				wg.Go(func() {
					part := got[k*size/4 : (k+1)*size/4]
					if _, err := h.ReadAt(part, int64(k*size/4)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if !bytes.Equal(got, model) {
				t.Fatal("read back differs")
			}
		})
	}
}
