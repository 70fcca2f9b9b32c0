package tcp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

// The benchmarks of issue 18, item 5: the same jobs against this NVMe/TCP
// target and host and against nbd's server and client, on loopback over
// the same kind of memory disk. Run them on a quiet machine:
//
//	go test -run '^$' -bench 'Loopback' -benchtime 5s ./nvme/tcp/
const benchDisk = 256 << 20

type benchJob struct {
	name  string
	size  int
	depth int
	write bool
}

var benchJobs = []benchJob{
	{"4KiB-randread-qd32", 4 << 10, 32, false},
	{"64KiB-read-qd8", 64 << 10, 8, false},
	{"64KiB-write-qd8", 64 << 10, 8, true},
	{"128KiB-write-qd8", 128 << 10, 8, true}, // two pages: a PageTaker takes both
}

// runJob runs b.N I/Os of job over d from job.depth goroutines.
func runJob(b *testing.B, d interface {
	ReadAt([]byte, int64) (int, error)
	WriteAt([]byte, int64) (int, error)
}, job benchJob) {
	b.SetBytes(int64(job.size))
	b.ReportAllocs()
	var n atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range job.depth {
		wg.Go(func() {
			buf := make([]byte, job.size)
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for n.Add(1) <= int64(b.N) {
				off := int64(r.IntN(benchDisk/job.size)) * int64(job.size)
				var err error
				if job.write {
					_, err = d.WriteAt(buf, off)
				} else {
					_, err = d.ReadAt(buf, off)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkLoopbackNVMeTCP(b *testing.B) {
	for _, queues := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, job := range benchJobs {
			b.Run(fmt.Sprintf("%s/queues=%d", job.name, queues), func(b *testing.B) {
				disk := nbd.NewMemDisk(benchDisk)
				_, addr := startServer(b, disk, 512)
				h := dialTest(b, addr, &Config{IOQueues: queues, KeepAlive: -1})
				runJob(b, h, job)
			})
		}
	}
}

func BenchmarkLoopbackNBD(b *testing.B) {
	for _, conns := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, job := range benchJobs {
			b.Run(fmt.Sprintf("%s/conns=%d", job.name, conns), func(b *testing.B) {
				srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(benchDisk)}}}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go srv.Serve(l)
				defer srv.Close()
				c, err := nbd.Dial(context.Background(), "nbd://"+l.Addr().String()+"/", nbd.WithConnections(conns))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				runJob(b, c, job)
			})
		}
	}
}

// BenchmarkLoopbackBridge runs the jobs through an NVMe-to-NBD bridge:
// the namespace is an nbd.Client of an nbd.Server on the memory disk, so
// each command crosses both pairs (each queue a goroutine pair, its reads
// and writes started on the NBD client and finished by its worker).
func BenchmarkLoopbackBridge(b *testing.B) {
	for _, job := range benchJobs {
		b.Run(job.name, func(b *testing.B) {
			_, addr := startServer(b, nbdBridge(b, nbd.NewMemDisk(benchDisk)), 512)
			h := dialTest(b, addr, &Config{IOQueues: 1, KeepAlive: -1})
			runJob(b, h, job)
		})
	}
}
