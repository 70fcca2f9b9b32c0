package tcp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// waitFreeBytes waits until the server's free slots keep no memory, and
// fails the test after limit.
func waitFreeBytes(t testing.TB, s *Server, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); s.freeBytes() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle queues' free slots still keep %d bytes after %v", s.freeBytes(), limit)
		}
	}
}

// After a burst of large writes and reads a queue's free slots keep their
// buffers (a copying backend) or pages (a PageTaker), and let them go
// once the queue has taken no command for the idle time; the next
// commands make them anew, and every byte reads back as written. (Before
// the trim, the buffers stayed for the connection's life.)
func TestServerIdleTrim(t *testing.T) {
	const size = 4 << 20
	for _, copying := range []bool{true, false} {
		t.Run(fmt.Sprintf("copying %v", copying), func(t *testing.T) {
			mem := nbd.NewMemDisk(size)
			var disk nbd.Backend = mem
			if copying {
				disk = &copyingDisk{MemDisk: mem}
			}
			s, addr := startServer(t, disk, 512, func(s *Server) { s.testBufferIdle = 500 * time.Millisecond })
			h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 16, KeepAlive: -1})
			model := make([]byte, size)
			rng := rand.NewChaCha8([32]byte{3, 4})
			burst := func() {
				rng.Read(model)
				var wg sync.WaitGroup
				const part = size / 16 // 256 KiB each: 2 commands of 128 KiB
				for k := range 16 {
					wg.Go(func() {
						if _, err := h.WriteAt(model[k*part:(k+1)*part], int64(k*part)); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				got := make([]byte, size)
				for k := range 16 {
					wg.Go(func() {
						if _, err := h.ReadAt(got[k*part:(k+1)*part], int64(k*part)); err != nil {
							t.Error(err)
						}
					})
				}
				wg.Wait()
				if !bytes.Equal(got, model) {
					t.Fatal("read back differs")
				}
			}
			burst()
			burst() // a PageTaker gives pages back for a range it has
			if n := s.freeBytes(); n < 128<<10 {
				t.Fatalf("the free slots keep %d bytes right after the burst, want at least a transfer's", n)
			}
			waitFreeBytes(t, s, 5*time.Second)
			burst()
			burst()
			waitFreeBytes(t, s, 5*time.Second)
		})
	}
}
