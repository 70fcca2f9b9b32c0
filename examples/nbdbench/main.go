// Command nbdbench runs fio-style jobs through the nhd NBD client against
// any NBD URI and prints IOPS, bandwidth and latency percentiles.
//
//	nbdbench -uri 'nbd+unix:///?socket=/tmp/nbd.sock' -rw randread -bs 4k -iodepth 32 -runtime 5s
//
// Each of -iodepth goroutines keeps one request in flight, so iodepth is
// the number of concurrent requests, as in fio. With -engine async one
// goroutine keeps them all in flight with StartRead/StartWrite and waits
// for the oldest, as fio's libnbd engine does from its one thread. -connections > 1 uses
// multi-conn when the server advertises it. Latency is measured per
// request from the call to its return, into a log-linear histogram (about
// 3% resolution); nothing is allocated per request.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/nbd"
)

func main() {
	var j job
	flag.StringVar(&j.URI, "uri", "", "NBD URI of the export (nbd://, nbds://, nbd+unix://, nbds+unix://)")
	flag.StringVar(&j.RW, "rw", "randread", "read, write, randread, randwrite or randrw")
	flag.IntVar(&j.MixRead, "rwmixread", 50, "percentage of reads for randrw")
	bs := flag.String("bs", "4k", "block size (suffixes k, m)")
	flag.IntVar(&j.IODepth, "iodepth", 1, "requests in flight")
	flag.DurationVar(&j.Runtime, "runtime", 5*time.Second, "how long to run")
	flag.IntVar(&j.Connections, "connections", 1, "connections (multi-conn)")
	flag.StringVar(&j.Engine, "engine", "goroutines", "goroutines: one goroutine per request in flight (ReadAt/WriteAt); async: one goroutine keeps them all in flight (StartRead/StartWrite)")
	flag.BoolVar(&j.Splice, "splice", false, "hand large WRITE payloads to the kernel without a copy (nbd.WithSplicedWrites)")
	flag.DurationVar(&j.ReplySpin, "replyspin", nbd.DefaultClientReplySpin, "how long a request alone on the connection spins for its reply (nbd.WithReplySpin; 0: park at once)")
	sizeFlag := flag.String("size", "0", "bytes of the export to use (0: all)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if j.BS, err = size.Parse(*bs); err != nil {
		fatal(err)
	}
	if j.Size, err = size.Parse(*sizeFlag); err != nil {
		fatal(err)
	}
	if j.URI == "" {
		fatal(fmt.Errorf("-uri is required"))
	}
	res, err := j.run(context.Background())
	if err != nil {
		pprof.StopCPUProfile()
		fatal(err)
	}
	res.print(os.Stdout)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "nbdbench:", err)
	os.Exit(1)
}
