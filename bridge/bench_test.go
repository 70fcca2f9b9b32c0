package bridge

import (
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/nbd"
)

// benchBackends are the backends a bridge is benchmarked over: a memory
// disk (the front end alone) and an NBD client of an in-process server.
var benchBackends = []string{"mem", "nbd"}

func benchBridge(tb testing.TB, v Variant, backend string) *Bridge {
	tb.Helper()
	disk := nbd.NewMemDisk(64 << 20)
	var be interface {
		ReadAt([]byte, int64) (int, error)
		WriteAt([]byte, int64) (int, error)
	} = disk
	if backend == "nbd" {
		be = serve(tb, disk)
	}
	b, err := New(Config{Backend: be, Datapath: v.Datapath, Sectors: 64 << 20 / 512})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// run runs command i of a sequential workload over the first 4 MiB.
func run(b *Bridge, write bool, buf []byte, i int) error {
	off := int64(i%64) * int64(len(buf))
	if write {
		return b.Write(buf, off)
	}
	return b.Read(buf, off)
}

// BenchmarkBridge runs 64 KiB READ/WRITE DMA EXT on every Table 4 variant.
func BenchmarkBridge(b *testing.B) {
	for _, v := range Table4() {
		for _, be := range benchBackends {
			for _, dir := range []string{"read", "write"} {
				b.Run(v.Name+"/"+be+"/"+dir, func(b *testing.B) {
					br := benchBridge(b, v, be)
					buf := make([]byte, DefaultMaxCommand)
					for i := range 64 {
						if err := run(br, true, buf, i); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(len(buf)))
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if err := run(br, dir == "write", buf, i); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			}
		}
	}
}

// TestZeroAllocs checks that a command allocates nothing in steady state
// on any variant, over a memory disk (an NBD server's goroutines would be
// counted too).
func TestZeroAllocs(t *testing.T) {
	for _, v := range Table4() {
		t.Run(v.Name, func(t *testing.T) {
			br := benchBridge(t, v, "mem")
			buf := make([]byte, DefaultMaxCommand)
			i := 0
			for _, write := range []bool{true, false} {
				for range 64 {
					run(br, write, buf, i)
					i++
				}
				if n := allocs.PerRun(1000, func() {
					if err := run(br, write, buf, i); err != nil {
						t.Fatal(err)
					}
					i++
				}); n > allocs.Slack {
					t.Errorf("write %v: %.1f allocations per command", write, n)
				}
			}
		})
	}
}
