package main

import (
	"context"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// benchLane builds one drive of variant v over a fresh in-process server,
// with span bytes written, and returns its lane ready for commands.
func benchLane(b testing.TB, v variant, bs int, span int64) *lane {
	b.Helper()
	srv := nbdtest.Start(b, nbdtest.WithSize(span))
	ctx := context.Background()
	c, err := nbd.Dial(ctx, srv.URI)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	d, err := newDrive(v, c, uint64(span/512), bs, defaultTuning)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	dk := newDisk(span, bs, 1)
	l := newLane(d, dk, 0, 1, 1)
	if _, err := runPhase(ctx, []*lane{l}, Workload{Name: "fill", BlockSize: bs}, budget{ops: span / int64(bs)}); err != nil {
		b.Fatal(err)
	}
	return l
}

// warm runs n commands of the lane's workload, so that every buffer on
// the path (the server's per-request slots among them) has grown to size.
func warm(tb testing.TB, l *lane, n int) {
	tb.Helper()
	for range n {
		if _, err := l.step(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestZeroAllocs checks the steady state of the whole path, host driver ->
// ATA device -> DMA engine and checksum tap -> NBD client -> in-process
// server -> memory disk and back, with verification: no allocation per
// command in any goroutine, for every variant and both directions.
func TestZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a few thousand commands")
	}
	for _, v := range variants {
		for _, dir := range []string{"read", "write"} {
			l := benchLane(t, v, 64<<10, 2<<20)
			l.w = Workload{Name: dir, BlockSize: 64 << 10, ReadPct: 100}
			if dir == "write" {
				l.w.ReadPct = 0
			}
			l.b, l.issued = budget{ops: 1 << 62}, 0
			warm(t, l, 100)
			var err error
			if n := testing.AllocsPerRun(100, func() {
				if _, e := l.step(context.Background()); e != nil {
					err = e
				}
			}); n != 0 || err != nil {
				t.Errorf("%s %s: %v allocations per command (%v)", v.Name, dir, n, err)
			}
		}
	}
}

// BenchmarkCommand runs 64 KiB READ DMA EXT and WRITE DMA EXT commands
// through the whole path: host driver -> ATA device -> DMA engine (with
// the checksum tap) -> NBD client -> in-process NBD server, verifying
// each, for every datapath variant.
func BenchmarkCommand(b *testing.B) {
	for _, v := range variants {
		for _, dir := range []string{"read", "write"} {
			b.Run(v.Name+"/"+dir, func(b *testing.B) {
				const bs = 64 << 10
				l := benchLane(b, v, bs, 16<<20)
				l.w = Workload{Name: dir, BlockSize: bs, ReadPct: 100}
				if dir == "write" {
					l.w.ReadPct = 0
				}
				l.b, l.issued = budget{ops: 1 << 62}, 0
				warm(b, l, 200)
				ctx := context.Background()
				b.SetBytes(bs)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := l.step(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
