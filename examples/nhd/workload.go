package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nhdkit/nhd/internal/size"
)

// Workload is what the host asks of the disk: a block size, a share of
// reads, and sequential or random addresses. A workload runs in phases: it
// first writes every block it will touch (so every later read has known
// data to be verified against), then runs its mix.
type Workload struct {
	Name      string
	BlockSize int     // bytes, a multiple of 512
	ReadPct   int     // 0..100: share of reads in the mixed phase
	Random    bool    // random addresses instead of sequential ones
	ReadP99   float64 // QoS limit on read latency p99 in microseconds, 0 for none
	WriteP99  float64 // QoS limit on write latency p99 in microseconds, 0 for none
}

// Workloads by name. seq64k is the paper's: 64 KiB READ DMA EXT and WRITE
// DMA EXT, sequential, then random.
var namedWorkloads = map[string][]Workload{
	"seq64k": {
		{Name: "seq64k-write", BlockSize: 64 << 10, ReadPct: 0},
		{Name: "seq64k-read", BlockSize: 64 << 10, ReadPct: 100},
		{Name: "rand64k-write", BlockSize: 64 << 10, ReadPct: 0, Random: true},
		{Name: "rand64k-read", BlockSize: 64 << 10, ReadPct: 100, Random: true},
	},
	"rand4k": {
		{Name: "rand4k-write", BlockSize: 4 << 10, ReadPct: 0, Random: true},
		{Name: "rand4k-read", BlockSize: 4 << 10, ReadPct: 100, Random: true},
	},
	// The SSD seed's mix: 4 KiB, 70% random read / 30% random write, with its
	// QoS limits: read p99 <= 1000 us, write p99 <= 200 us.
	"randrw70": {
		{Name: "randrw70", BlockSize: 4 << 10, ReadPct: 70, Random: true, ReadP99: 1000, WriteP99: 200},
	},
}

// parseWorkload reads a workload name, or a custom one written as
// "bs=16k,read=70,rand" (bs in bytes with an optional k or m suffix, read a
// percentage, rand or seq).
func parseWorkload(s string) ([]Workload, error) {
	if w, ok := namedWorkloads[s]; ok {
		return w, nil
	}
	if !strings.Contains(s, "=") {
		return nil, fmt.Errorf("unknown workload %q: want seq64k, rand4k, randrw70 or a custom bs=SIZE,read=PCT,rand|seq", s)
	}
	w := Workload{Name: s, BlockSize: 64 << 10, ReadPct: 100}
	for _, f := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "bs":
			n, err := parseSize(v)
			if err != nil {
				return nil, fmt.Errorf("workload %q: bs: %v", s, err)
			}
			w.BlockSize = int(n)
		case "read":
			p, err := strconv.Atoi(v)
			if err != nil || p < 0 || p > 100 {
				return nil, fmt.Errorf("workload %q: read must be a percentage 0..100", s)
			}
			w.ReadPct = p
		case "rand", "seq":
			if strings.Contains(f, "=") {
				return nil, fmt.Errorf("workload %q: %s takes no value", s, k)
			}
			w.Random = k == "rand"
		default:
			return nil, fmt.Errorf("workload %q: unknown field %q (want bs=, read=, rand, seq)", s, k)
		}
	}
	if w.BlockSize < 512 || w.BlockSize%512 != 0 || w.BlockSize > 32<<20 {
		return nil, fmt.Errorf("workload %q: bs must be a multiple of 512 between 512 and 32M", s)
	}
	return []Workload{w}, nil
}

// parseSize reads a positive size: 4096, 4k, 64K, 1m, 2G.
func parseSize(s string) (int64, error) {
	v, err := size.Parse(s)
	if err != nil || v == 0 {
		return 0, errors.New("want a positive size such as 4096, 64k, 1m or 2g")
	}
	return v, nil
}
