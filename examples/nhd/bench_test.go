package main

import (
	"context"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/bridge"

	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// benchLane builds one drive of variant v over a fresh in-process server,
// with span bytes written, and returns its lane ready for commands.
func benchLane(b testing.TB, v bridge.Variant, bs int, span int64) *lane {
	b.Helper()
	srv := nbdtest.Start(b, nbdtest.WithSize(span))
	ctx := context.Background()
	c, err := nbd.Dial(ctx, srv.URI)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	d := testBridge(b, v, c, uint64(span/512), bs)
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
	for _, v := range bridge.Table4() {
		for _, dir := range []string{"read", "write"} {
			l := benchLane(t, v, 64<<10, 2<<20)
			l.w = Workload{Name: dir, BlockSize: 64 << 10, ReadPct: 100}
			if dir == "write" {
				l.w.ReadPct = 0
			}
			l.b, l.issued = budget{ops: 1 << 62}, 0
			warm(t, l, 100)
			var err error
			if n := allocs.PerRun(1000, func() {
				if _, e := l.step(context.Background()); e != nil {
					err = e
				}
			}); n > allocs.Slack || err != nil {
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
	for _, v := range bridge.Table4() {
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

// BenchmarkPhases splits one 64 KiB command of each series variant into
// its backend call and the rest (the front end), for the front-end drive
// (over a memory disk, as Table 4 measures the front end) and for the
// bridge (over the NBD client), and times the bare NBD client's request
// beside them, interleaved, one of each per iteration. It reports the
// medians in microseconds: front-us and front-backend-us, bridge-us and
// bridge-nbd-us, bare-nbd-us. The README's "Where the series rows' gap
// is" reads them.
func BenchmarkPhases(b *testing.B) {
	const bs = 64 << 10
	for _, v := range bridge.Table4()[:3] {
		for _, dir := range []string{"read", "write"} {
			b.Run(v.Name+"/"+dir, func(b *testing.B) {
				ctx := context.Background()
				const span, local = 8 << 20, 2 << 20
				srv := nbdtest.Start(b, nbdtest.WithSize(span))
				c, err := nbd.Dial(ctx, srv.URI)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				w := Workload{Name: dir, BlockSize: bs, ReadPct: 100}
				if dir == "write" {
					w.ReadPct = 0
				}
				var tbs [2]*timedBackend
				var lanes [2]*lane
				for i, be := range []struct {
					be   ata.Backend
					size int64
				}{{nbd.NewMemDisk(local), local}, {c, span}} {
					tbs[i] = &timedBackend{Backend: be.be}
					d := testBridge(b, v, tbs[i], uint64(be.size/512), bs)
					lanes[i] = newLane(d, newDisk(be.size, bs, 1), 0, 1, 1)
					if _, err := runPhase(ctx, lanes[i:i+1], Workload{Name: "fill", BlockSize: bs}, budget{ops: be.size / bs}); err != nil {
						b.Fatal(err)
					}
					lanes[i].w, lanes[i].b, lanes[i].issued = w, budget{ops: 1 << 62}, 0
					warm(b, lanes[i], 50)
				}
				remote := lanes[1].disk
				buf := make([]byte, bs)
				var total, inBackend [2]durs
				var bare durs
				var blk uint64
				for b.Loop() {
					for i, l := range lanes {
						tbs[i].t = 0
						d, err := l.step(ctx)
						if err != nil {
							b.Fatal(err)
						}
						total[i] = append(total[i], d)
						inBackend[i] = append(inBackend[i], tbs[i].t)
					}
					blk = (blk + 1) % uint64(remote.blocks)
					off := int64(blk) * bs
					var t0 time.Time
					if dir == "write" {
						remote.Fill(buf, off)
						t0 = time.Now()
						_, err = c.WriteAt(buf, off)
					} else {
						t0 = time.Now()
						_, err = c.ReadAt(buf, off)
					}
					bare = append(bare, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
				}
				us := func(d time.Duration) float64 { return float64(d) / 1e3 }
				b.ReportMetric(us(total[0].median()), "front-us")
				b.ReportMetric(us(inBackend[0].median()), "front-backend-us")
				b.ReportMetric(us(total[1].median()), "bridge-us")
				b.ReportMetric(us(inBackend[1].median()), "bridge-nbd-us")
				b.ReportMetric(us(bare.median()), "bare-nbd-us")
			})
		}
	}
}

// BenchmarkRequestAfterGap times a bare 64 KiB NBD read from the
// in-process server when the caller does something else between requests:
// nothing, a busy-wait of 8 us, a time.Sleep(10 us) (the process idles, its
// threads park; the timer's real length is reported), or a walk over 4 MiB
// of other memory. It reports the medians in microseconds: request-us and
// gap-us. The README's "a goroutine hand-off to the other core" reads them.
func BenchmarkRequestAfterGap(b *testing.B) {
	const bs, span = 64 << 10, 8 << 20
	other := make([]byte, 4<<20)
	for _, gap := range []string{"none", "busy-8us", "sleep-10us", "touch-4MiB"} {
		b.Run(gap, func(b *testing.B) {
			srv := nbdtest.Start(b, nbdtest.WithSize(span))
			ctx := context.Background()
			c, err := nbd.Dial(ctx, srv.URI)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, bs)
			for i := range buf {
				buf[i] = byte(i*7 + 1)
			}
			for off := int64(0); off < span; off += bs {
				if _, err := c.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
			}
			var req, gaps durs
			var i int64
			b.SetBytes(bs)
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.ReadAt(buf, i*bs%span); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				req = append(req, t1.Sub(t0))
				i++
				switch gap {
				case "busy-8us":
					for time.Since(t1) < 8*time.Microsecond {
					}
				case "sleep-10us":
					time.Sleep(10 * time.Microsecond)
				case "touch-4MiB":
					for j := 0; j < len(other); j += 64 {
						other[j]++
					}
				}
				gaps = append(gaps, time.Since(t1))
			}
			b.ReportMetric(float64(req.median())/1e3, "request-us")
			b.ReportMetric(float64(gaps.median())/1e3, "gap-us")
		})
	}
}
