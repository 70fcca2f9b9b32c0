package tcp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// With SplicedWrites, writes of every size from many goroutines, with
// digests off and on, one queue and two, reach the disk whole, and the
// large ones go by splice (on Linux).
func TestHostSplicedWrites(t *testing.T) {
	for _, digests := range []bool{false, true} {
		for _, queues := range []int{1, 2} {
			t.Run(fmt.Sprintf("digests=%v/queues=%d", digests, queues), func(t *testing.T) {
				disk := nbd.NewMemDisk(32 << 20)
				_, addr := startServer(t, disk, 512)
				h := dialTest(t, addr, &Config{IOQueues: queues, KeepAlive: -1, SplicedWrites: true, HeaderDigest: digests, DataDigest: digests})
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(g), 2))
						for i := range 30 {
							size := []int{4 << 10, 64 << 10, 1 << 20}[r.IntN(3)]
							buf := make([]byte, size)
							for j := range buf {
								buf[j] = byte(g*7 + i + j)
							}
							off := int64(g)<<22 + int64(r.IntN(3))<<20
							if _, err := h.WriteAt(buf, off); err != nil {
								t.Error(err)
								return
							}
							got := make([]byte, size)
							if _, err := disk.ReadAt(got, off); err != nil {
								t.Error(err)
								return
							}
							if !bytes.Equal(got, buf) {
								t.Errorf("goroutine %d: a %d-byte write at %d reached the disk wrong", g, size, off)
								return
							}
						}
					})
				}
				wg.Wait()
				var spliced int64
				for _, q := range h.io {
					q.wmu.Lock()
					if q.wb != nil {
						spliced += q.wb.Spliced()
					}
					q.wmu.Unlock()
				}
				if runtime.GOOS == "linux" && spliced == 0 {
					t.Fatal("nothing spliced")
				}
			})
		}
	}
}
