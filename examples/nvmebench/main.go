// Command nvmebench runs issue 18's comparison in one process: this
// module's NVMe/TCP target and host against its NBD server and client, on
// loopback over the same kind of memory disk, with the same jobs (4 KiB
// random reads at depth 32, 64 KiB reads and writes at depth 8), with one
// I/O queue (one NBD connection) and with one per core. Each job runs
// -rounds times on each pair, the pairs alternated; it prints one row per
// job: the median bandwidth of each pair and their ratio, the median CPU
// time the process (server and client together) spent per GB moved, which
// depends less than bandwidth on what else the machine runs, and the ratio
// of each round, to show the spread.
//
//	go run ./examples/nvmebench -runtime 2s -rounds 5
//
// Run it on a quiet machine; the same jobs are Go benchmarks in nvme/tcp
// (BenchmarkLoopbackNVMeTCP, BenchmarkLoopbackNBD). -fill sets the
// NVMe/TCP host's tcp.Config.QueueFill (-fill 1: every command to the
// freest queue), -splice has both hosts splice large writes. With -count
// it runs one job on one pair for -ops operations, which syscalls.sh
// counts the system calls of, per operation and per side:
//
//	examples/nvmebench/syscalls.sh nvme 4KiB-randread-qd32 20000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
	"github.com/nhdkit/nhd/nvme/tcp"
)

const diskSize = 64 << 20

type job struct {
	name  string
	size  int
	depth int
	write bool
}

var jobs = []job{
	{"4KiB randread qd32", 4 << 10, 32, false},
	{"64KiB read qd8", 64 << 10, 8, false},
	{"64KiB write qd8", 64 << 10, 8, true},
}

type disk interface {
	ReadAt([]byte, int64) (int, error)
	WriteAt([]byte, int64) (int, error)
}

func main() {
	runtimeFlag := flag.Duration("runtime", 5*time.Second, "how long each job runs on each pair, each round")
	rounds := flag.Int("rounds", 3, "rounds of each job, the two pairs alternated (first pair swapped each round); figures are medians")
	pair := flag.String("count", "", "run one job on one pair (nvme or nbd) for -ops operations, printing each socket's side on stderr (syscalls.sh)")
	jobName := flag.String("job", "4KiB-randread-qd32", "the job of -count: 4KiB-randread-qd32, 64KiB-read-qd8 or 64KiB-write-qd8")
	ops := flag.Int("ops", 20000, "the operations of -count")
	queues := flag.Int("queues", 1, "the I/O queues (NBD connections) of -count")
	flag.IntVar(&queueFill, "fill", 0, "the NVMe/TCP host's tcp.Config.QueueFill (0: its default; 1 spreads the commands over the queues)")
	flag.BoolVar(&splicedWrites, "splice", false, "both hosts hand large writes to the kernel without a copy (tcp.Config.SplicedWrites, nbd.WithSplicedWrites)")
	flag.Parse()
	var err error
	if *pair != "" {
		j, ok := findJob(*jobName)
		if !ok {
			err = fmt.Errorf("unknown job %q", *jobName)
		} else {
			err = count(os.Stderr, *pair, j, *ops, *queues)
		}
	} else {
		err = run(os.Stdout, *runtimeFlag, *rounds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmebench:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, d time.Duration, rounds int) error {
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: want at least 1", rounds)
	}
	fmt.Fprintf(out, "%-20s %-8s %13s %12s %7s %14s %14s  %s\n", "job", "queues", "NVMe/TCP MB/s", "NBD MB/s", "ratio", "NVMe CPU s/GB", "NBD CPU s/GB", "ratio of each round")
	for _, queues := range []int{1, runtime.GOMAXPROCS(0)} {
		for _, j := range jobs {
			nv, nb, err := rounded(queues, j, d, rounds)
			if err != nil {
				return err
			}
			var each []string
			for i := range nv {
				each = append(each, fmt.Sprintf("%.2f", nv[i].bps/nb[i].bps))
			}
			mv, mb := median(nv), median(nb)
			fmt.Fprintf(out, "%-20s %-8d %13.1f %12.1f %7.2f %14.3f %14.3f  %s\n", j.name, queues, mv.bps/1e6, mb.bps/1e6, mv.bps/mb.bps, mv.cpuPerGB, mb.cpuPerGB, strings.Join(each, " "))
		}
	}
	return nil
}

// rounded measures job j on both pairs, rounds times each, alternating
// them and swapping which goes first each round, so that what else the
// machine does falls on both alike.
func rounded(queues int, j job, d time.Duration, rounds int) (nv, nb []result, err error) {
	for i := range rounds {
		for k := range 2 {
			var r result
			if (i+k)%2 == 0 {
				if r, err = nvmePair(queues, func(dk disk) (result, error) { return measure(dk, j, d) }); err != nil {
					return nil, nil, fmt.Errorf("NVMe/TCP %s: %w", j.name, err)
				}
				nv = append(nv, r)
			} else {
				if r, err = nbdPair(queues, func(dk disk) (result, error) { return measure(dk, j, d) }); err != nil {
					return nil, nil, fmt.Errorf("NBD %s: %w", j.name, err)
				}
				nb = append(nb, r)
			}
		}
	}
	return nv, nb, nil
}

// median returns the median rate of rs and the median CPU per GB (each
// taken apart; the mean of the middle two for an even count).
func median(rs []result) result {
	mid := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		n := len(v)
		if n%2 == 1 {
			return v[n/2]
		}
		return (v[n/2-1] + v[n/2]) / 2
	}
	return result{bps: mid(func(r result) float64 { return r.bps }), cpuPerGB: mid(func(r result) float64 { return r.cpuPerGB })}
}

// result is what measure finds: bytes per second, and CPU seconds (user
// and system, of the whole process) per GB.
type result struct {
	bps, cpuPerGB float64
}

// cpuTime returns the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// splicedWrites is -splice: both pairs' hosts splice large writes.
var splicedWrites bool

// queueFill is -fill: the NVMe/TCP host's QueueFill.
var queueFill int

// nvmePair serves a memory disk with tcp.Server and runs f on a tcp.Host.
func nvmePair(queues int, f func(disk) (result, error)) (result, error) {
	const nqn = "nqn.2026-01.io.nhd:bench"
	fab := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: nqn, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(diskSize)}}}}}
	srv := &tcp.Server{Fabric: fab}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	go srv.Serve(l)
	defer srv.Close()
	h, err := tcp.Dial(context.Background(), l.Addr().String(), nqn, &tcp.Config{IOQueues: queues, QueueFill: queueFill, KeepAlive: -1, SplicedWrites: splicedWrites})
	if err != nil {
		return result{}, err
	}
	defer h.Close()
	return f(h)
}

// nbdPair serves a memory disk with nbd.Server and runs f on an
// nbd.Client with that many connections.
func nbdPair(conns int, f func(disk) (result, error)) (result, error) {
	srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(diskSize)}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	go srv.Serve(l)
	defer srv.Close()
	opts := []nbd.Option{nbd.WithConnections(conns)}
	if splicedWrites {
		opts = append(opts, nbd.WithSplicedWrites())
	}
	c, err := nbd.Dial(context.Background(), "nbd://"+l.Addr().String()+"/", opts...)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	return f(c)
}

// measure runs j on dk for d from j.depth goroutines (after filling the
// disk, so reads meet allocated memory) and returns bytes per second and
// CPU seconds per GB.
// once reads or writes buf at a random aligned offset of dk, as job j does.
func (j job) once(dk disk, r *rand.Rand, buf []byte) error {
	off := int64(r.IntN(diskSize/j.size)) * int64(j.size)
	if j.write {
		_, err := dk.WriteAt(buf, off)
		return err
	}
	_, err := dk.ReadAt(buf, off)
	return err
}

func measure(dk disk, j job, d time.Duration) (result, error) {
	fill := make([]byte, 1<<20)
	for off := int64(0); off < diskSize; off += int64(len(fill)) {
		if _, err := dk.WriteAt(fill, off); err != nil {
			return result{}, err
		}
	}
	var ops atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	begin, cpu := time.Now(), cpuTime()
	for g := range j.depth {
		wg.Go(func() {
			buf := make([]byte, j.size)
			r := rand.New(rand.NewPCG(uint64(g), 18))
			for time.Now().Before(stop) {
				if err := j.once(dk, r, buf); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return result{}, *p
	}
	moved := float64(ops.Load()) * float64(j.size)
	used := (cpuTime() - cpu).Seconds()
	return result{bps: moved / time.Since(begin).Seconds(), cpuPerGB: used / max(moved/1e9, 1e-9)}, nil
}
