//go:build !race

package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/nbd"
)

// Host and Server together allocate nothing per command in steady state
// (the race detector allocates on its own, hence the build tag): every
// allocation the process makes during a call is counted, the target's
// included. With digests off writes go in-capsule, with digests on the
// 128 KiB ones take an R2T. On an NVMe-to-NBD bridge (the namespace an
// nbd.Client of an nbd.Server in the same process) the reads and writes
// are started on the client and finished by the queue's worker, and the
// whole chain allocates nothing either.
func TestZeroAllocs(t *testing.T) {
	for _, tc := range []struct {
		dg     bool
		bridge bool
	}{{false, false}, {true, false}, {false, true}} {
		dg := tc.dg
		var disk nbd.Backend = nbd.NewMemDisk(16 << 20)
		if tc.bridge {
			disk = nbdBridge(t, disk)
		}
		inCap := 0
		if dg {
			inCap = 8192
		}
		_, addr := startServer(t, disk, 512, inCapsule(inCap))
		h := dialTest(t, addr, &Config{IOQueues: 1, KeepAlive: -1, HeaderDigest: dg, DataDigest: dg})
		bridge, warm := tc.bridge, 2
		if bridge {
			warm = 200 // and every request slot of the NBD client
		}
		buf := make([]byte, 4096)
		big := make([]byte, 128<<10)
		var err error
		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"WriteAt 4K", func() { _, err = h.WriteAt(buf, 8192) }},
			{"ReadAt 4K", func() { _, err = h.ReadAt(buf, 8192) }},
			{"WriteAt 128K", func() { _, err = h.WriteAt(big, 1<<20) }},
			{"ReadAt 128K", func() { _, err = h.ReadAt(big, 1<<20) }},
			{"ReadAt 1M", func() { _, err = h.ReadAt(make1M, 2<<20) }},
			{"Flush", func() { err = h.Flush(context.Background()) }},
		} {
			for range warm { // warm up: slot buffers, the disk's chunks, the poller
				tc.f()
			}
			if n := allocs.PerRun(1000, tc.f); n > allocs.Slack || err != nil {
				t.Errorf("digests %v, bridge %v, %s: %v allocations per call, err %v", dg, bridge, tc.name, n, err)
			}
		}
	}
}

var make1M = make([]byte, 1<<20)

// A queue whose idle buffers were let go allocates nothing per command
// once warm again, and its idle check, which runs every idle time while
// commands come (a short one here), allocates nothing per command either.
func TestZeroAllocsAfterIdle(t *testing.T) {
	disk := &copyingDisk{MemDisk: nbd.NewMemDisk(16 << 20)} // reads in the slots' buffers
	s, addr := startServer(t, disk, 512, func(s *Server) { s.testBufferIdle = 50 * time.Millisecond })
	h := dialTest(t, addr, &Config{IOQueues: 1, KeepAlive: -1})
	big := make([]byte, 128<<10)
	var err error
	write := func() { _, err = h.WriteAt(big, 1<<20) }
	read := func() { _, err = h.ReadAt(big, 1<<20) }
	for round := range 2 {
		for name, f := range map[string]func(){"WriteAt 128K": write, "ReadAt 128K": read} {
			if n := allocs.PerRun(1000, f); n > allocs.Slack || err != nil {
				t.Errorf("round %d, %s: %v allocations per call, err %v", round, name, n, err)
			}
		}
		waitFreeBytes(t, s, 5*time.Second)
	}
}
