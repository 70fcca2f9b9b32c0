package dma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// memDev is a device backend in memory that can fail at a given offset.
type memDev struct {
	mu     sync.Mutex
	b      []byte
	failAt int64 // first bad byte; -1 for none
	err    error
	calls  int
}

func newDev(b []byte) *memDev { return &memDev{b: b, failAt: -1} }

func (d *memDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	end := off + int64(len(p))
	if d.failAt >= 0 && d.failAt < end {
		size := int64(len(d.b))
		n := copy(p, d.b[min(off, size):min(max(off, d.failAt), size)])
		return n, d.err
	}
	if off >= int64(len(d.b)) {
		return 0, io.EOF
	}
	n := copy(p, d.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (d *memDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	end := off + int64(len(p))
	if d.failAt >= 0 && d.failAt < end {
		n := copy(d.b[off:max(off, d.failAt)], p)
		return n, d.err
	}
	return copy(d.b[off:], p), nil
}

var errInjected = errors.New("test: injected backend error")

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func mustEngine(t fataler, c Config) *Engine {
	e, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// TestPaperFrontEnd reproduces Table 2 of the NHD paper from the engine's
// own mechanism running on a virtual clock: a 64 KiB transfer costs
// 34287 us store-and-forward (N1 + N2 + N3) and 4250 + 495 us streaming.
func TestPaperFrontEnd(t *testing.T) {
	const n = 64 << 10
	for _, tc := range []struct {
		name       string
		mode       Mode
		timing     Timing
		fifoBlocks int
		dir        Direction
		want       time.Duration
		interrupts int
	}{
		{"before, read", StoreAndForward, PaperBefore(), 0, ToHost, 34287 * time.Microsecond, 128},
		{"before, write", StoreAndForward, PaperBefore(), 0, ToDevice, 34287 * time.Microsecond, 128},
		{"after, read", Streaming, PaperAfter(), 0, ToHost, (4250 + 495) * time.Microsecond, 2},
		{"after, write", Streaming, PaperAfter(), 0, ToDevice, (4250 + 495) * time.Microsecond, 2},
		{"after, 8-sector FIFO", Streaming, PaperAfter(), 8, ToHost, (4250 + 495) * time.Microsecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &VirtualClock{}
			clk.Advance(time.Second) // any origin
			e := mustEngine(t, Config{Mode: tc.mode, Clock: clk, Timing: &tc.timing, FIFOBlocks: tc.fifoBlocks})
			defer e.Close()
			dev := pattern(n, 1)
			host := make([]byte, n)
			e.SetRegions(host[:4096], host[4096:n/2], host[n/2:])
			for i := range 2 { // a second transfer starts where the first ended
				start := clk.Now()
				var err error
				if tc.dir == ToHost {
					err = e.DeviceToHost(newDev(dev), 0, n)
				} else {
					copy(host, dev)
					err = e.HostToDevice(newDev(make([]byte, n)), 0, n)
				}
				if err != nil {
					t.Fatal(err)
				}
				if tc.dir == ToHost && !bytes.Equal(host, dev) {
					t.Fatal("host memory differs from the device")
				}
				tr := e.Last()
				got := tr.Elapsed()
				if tr.Start != start || clk.Now() != tr.End {
					t.Fatalf("transfer %d ran %v..%v, clock %v before and %v after", i, tr.Start, tr.End, start, clk.Now())
				}
				if dev := math.Abs(float64(got-tc.want)) / float64(tc.want); dev > 0.01 {
					t.Fatalf("64 KiB took %v, paper %v: %.2f%% off", got, tc.want, 100*dev)
				}
				if tr.Interrupts != tc.interrupts || tr.Completions != 1 || tr.Sectors != 128 {
					t.Fatalf("interrupts %d completions %d sectors %d", tr.Interrupts, tr.Completions, tr.Sectors)
				}
				t.Logf("%v: %v (paper %v), %.3f MiB/s", tc.name, got, tc.want, float64(n)/(1<<20)/got.Seconds())
			}
		})
	}
}

// TestStreamingNeedsRoom: the modelled time comes from the mechanism, so a
// one-sector FIFO in Streaming mode loses the overlap (the CPU waits for
// each sector to leave before it can write the next) and lands between the
// two figures.
func TestStreamingNeedsRoom(t *testing.T) {
	const n = 64 << 10
	elapsed := func(blocks int) time.Duration {
		tm := PaperAfter()
		e := mustEngine(t, Config{Clock: &VirtualClock{}, Timing: &tm, FIFOBlocks: blocks})
		defer e.Close()
		e.SetRegions(make([]byte, n))
		if err := e.DeviceToHost(newDev(make([]byte, n)), 0, n); err != nil {
			t.Fatal(err)
		}
		return e.Last().Elapsed()
	}
	one, many := elapsed(1), elapsed(64)
	// Serial: per sector 15.36 us of CPU DMA then 32 us of IDE.
	want := 60*time.Microsecond + 34*time.Microsecond + 128*(15360+32000)*time.Nanosecond + 60*time.Microsecond + 495*time.Microsecond
	if one != want {
		t.Fatalf("one-sector FIFO: %v, want %v", one, want)
	}
	if many >= one {
		t.Fatalf("64-sector FIFO %v is not faster than one sector %v", many, one)
	}
}

// spins are the Config.Spin values the property tests draw from: park at
// once, the default, a short and a long spin.
var spins = []time.Duration{-1, 0, time.Microsecond, 50 * time.Microsecond}

// inlineMaxes are the Config.InlineMax values the property tests draw
// from: never inline, inline up to a few sectors (so some transfers run on
// the worker and some inline on one engine), always inline.
var inlineMaxes = []int64{0, 5 * SectorSize, 1 << 40}

// TestTransfers moves random transfers in both directions and modes
// through random FIFO shapes and host memory layouts, several per engine,
// and checks every byte, the tap and the counters against a flat model.
func TestTransfers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			Mode:         rapid.SampledFrom([]Mode{Streaming, StoreAndForward}).Draw(t, "mode"),
			FIFOBlocks:   rapid.IntRange(1, 12).Draw(t, "fifoBlocks"),
			ChunkSectors: rapid.IntRange(1, 12).Draw(t, "chunk"),
			Spin:         rapid.SampledFrom(spins).Draw(t, "spin"),
			InlineMax:    rapid.SampledFrom(inlineMaxes).Draw(t, "inlineMax"),
		}
		var tapped []byte
		if rapid.Bool().Draw(t, "tap") {
			cfg.Tap = TapFunc(func(p []byte) { tapped = append(tapped, p...) })
		}
		e := mustEngine(t, cfg)
		defer e.Close()
		var want Stats
		for range rapid.IntRange(1, 4).Draw(t, "transfers") {
			sectors := rapid.IntRange(1, 24).Draw(t, "sectors")
			n := int64(sectors * SectorSize)
			off := int64(rapid.IntRange(0, 3000).Draw(t, "off"))
			sizes := rapid.SliceOfN(rapid.IntRange(0, 2000), 1, 6).Draw(t, "regions")
			var regions [][]byte
			var total int64
			for _, s := range sizes {
				regions = append(regions, pattern(s, byte(len(regions))))
				total += int64(s)
			}
			if total < n { // make room
				regions = append(regions, pattern(int(n-total), 99))
			}
			before := concat(regions)
			e.SetRegions(regions...)
			device := pattern(int(off+n)+rapid.IntRange(0, 700).Draw(t, "tail"), 7)
			devBefore := append([]byte(nil), device...)
			mdev := newDev(device)
			var dev interface {
				io.ReaderAt
				io.WriterAt
			} = mdev
			lend := false
			switch rapid.SampledFrom([]string{"plain", "async", "lending"}).Draw(t, "device") {
			case "async":
				dev = &asyncDev{memDev: mdev}
			case "lending":
				dev = newLendDev(mdev, SectorSize*rapid.IntRange(0, 8).Draw(t, "piece"))
				lend = cfg.Mode == Streaming
			}
			tapped = tapped[:0]
			var moved []byte
			if rapid.Bool().Draw(t, "read") {
				if err := e.DeviceToHost(dev, off, n); err != nil {
					t.Fatal(err)
				}
				moved = device[off : off+n]
				after := concat(regions)
				if !bytes.Equal(after[:n], moved) || !bytes.Equal(after[n:], before[n:]) {
					t.Fatal("host memory after the read is wrong")
				}
			} else {
				if err := e.HostToDevice(dev, off, n); err != nil {
					t.Fatal(err)
				}
				moved = before[:n]
				wantDev := append([]byte(nil), devBefore...)
				copy(wantDev[off:], moved)
				if !bytes.Equal(device, wantDev) {
					t.Fatal("device after the write is wrong")
				}
			}
			if cfg.Tap != nil && !bytes.Equal(tapped, moved) {
				t.Fatalf("tap saw %d bytes, not the %d moved, in order", len(tapped), len(moved))
			}
			tr := e.Last()
			wantInts := 2
			if cfg.Mode == StoreAndForward {
				wantInts = sectors
			}
			if tr.Bytes != n || tr.Sectors != int64(sectors) || tr.Interrupts != wantInts ||
				tr.Completions != 1 || tr.CopiedBytes != n || tr.CopiesPerByte() != 1 || tr.Err != nil ||
				tr.Inline != (cfg.Mode == Streaming && n <= cfg.InlineMax || lend) {
				t.Fatalf("Last() = %+v", tr)
			}
			want.Transfers++
			want.Interrupts += uint64(wantInts)
			want.Completions++
			want.Sectors += uint64(sectors)
			want.Bytes += uint64(n)
			want.Copies += uint64(tr.Copies)
			want.CopiedBytes += uint64(n)
		}
		if diff := cmp.Diff(want, e.Stats()); diff != "" {
			t.Fatalf("Stats (-want +got):\n%s", diff)
		}
	})
}

// TestTapHash plugs a hash.Hash in as the tap: the checksum computed in
// flight equals the checksum of the data.
func TestTapHash(t *testing.T) {
	for _, m := range []Mode{Streaming, StoreAndForward} {
		h := crc32.NewIEEE()
		e := mustEngine(t, Config{Mode: m, Tap: h})
		data := pattern(64<<10, 3)
		e.SetRegions(make([]byte, len(data)))
		if err := e.DeviceToHost(newDev(data), 0, int64(len(data))); err != nil {
			t.Fatal(err)
		}
		if got, want := h.Sum32(), crc32.ChecksumIEEE(data); got != want {
			t.Fatalf("%v: tap crc %#x, want %#x", m, got, want)
		}
		e.Close()
	}
}

func TestBackendErrors(t *testing.T) {
	const n = 32 * SectorSize
	for _, m := range []Mode{Streaming, StoreAndForward} {
		t.Run(m.String(), func(t *testing.T) {
			e := mustEngine(t, Config{Mode: m, FIFOBlocks: 8, ChunkSectors: 4})
			defer e.Close()
			host := make([]byte, n)
			e.SetRegions(host)

			// A read that fails at sector 13: the 13 sectors before it
			// reach the host, the error comes back wrapped.
			data := pattern(n, 5)
			dev := newDev(data)
			dev.failAt, dev.err = 13*SectorSize+100, errInjected
			err := e.DeviceToHost(dev, 0, n)
			if !errors.Is(err, errInjected) {
				t.Fatalf("read error %v, want the backend's", err)
			}
			tr := e.Last()
			if tr.Bytes != 13*SectorSize || !bytes.Equal(host[:tr.Bytes], data[:tr.Bytes]) || tr.Err != err {
				t.Fatalf("after a failed read: %d bytes moved, %v", tr.Bytes, tr.Err)
			}
			if s := e.Stats(); s.Failed != 1 || s.Transfers != 0 {
				t.Fatalf("Stats %+v", s)
			}

			// A device shorter than the transfer.
			if err := e.DeviceToHost(newDev(data[:n-10]), 0, n); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short device: %v", err)
			}

			// A write that fails at sector 20.
			wdev := newDev(make([]byte, n))
			wdev.failAt, wdev.err = 20*SectorSize, errInjected
			if err := e.HostToDevice(wdev, 0, n); !errors.Is(err, errInjected) {
				t.Fatalf("write error %v", err)
			}
			if got := e.Last().Bytes; got != 20*SectorSize {
				t.Fatalf("failed write moved %d bytes", got)
			}

			// The engine still works afterwards.
			if err := e.DeviceToHost(newDev(data), 0, n); err != nil || !bytes.Equal(host, data) {
				t.Fatalf("transfer after errors: %v", err)
			}
		})
	}
}

type failTap struct{ after, seen int }

func (f *failTap) Write(p []byte) (int, error) {
	f.seen += len(p)
	if f.seen > f.after {
		return 0, errInjected
	}
	return len(p), nil
}

func TestTapError(t *testing.T) {
	for _, m := range []Mode{Streaming, StoreAndForward} {
		tap := &failTap{after: 5 * SectorSize}
		e := mustEngine(t, Config{Mode: m, Tap: tap, FIFOBlocks: 4, ChunkSectors: 1})
		e.SetRegions(make([]byte, 64<<10))
		dev := newDev(make([]byte, 64<<10))
		if err := e.DeviceToHost(dev, 0, 64<<10); !errors.Is(err, errInjected) {
			t.Fatalf("%v: %v, want the tap's error", m, err)
		}
		if got := e.Last().Bytes; got != 5*SectorSize {
			t.Fatalf("%v: %d bytes reached the host after the tap failed", m, got)
		}
		// The producer stopped early instead of reading the whole device.
		if dev.calls > 5+4+2 {
			t.Fatalf("%v: %d backend reads after a failure at the sixth sector", m, dev.calls)
		}
		e.Close()
	}
}

func TestBadTransfers(t *testing.T) {
	e := mustEngine(t, Config{})
	defer e.Close()
	dev := newDev(make([]byte, 8192))
	if err := e.DeviceToHost(dev, 0, 512); !errors.Is(err, ErrNoMemory) {
		t.Errorf("no memory: %v", err)
	}
	e.SetRegions(make([]byte, 1024))
	for _, tc := range []struct {
		off, n int64
		want   error
	}{
		{0, 0, ErrLength}, {0, 100, ErrLength}, {0, -512, ErrLength}, {-1, 512, ErrLength},
		{0, 1536, ErrShortMemory},
	} {
		if err := e.DeviceToHost(dev, tc.off, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("DeviceToHost(%d, %d) = %v, want %v", tc.off, tc.n, err, tc.want)
		}
		if err := e.HostToDevice(dev, tc.off, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("HostToDevice(%d, %d) = %v, want %v", tc.off, tc.n, err, tc.want)
		}
	}
	for _, c := range []Config{{Mode: 7}, {FIFOBlocks: -1}, {ChunkSectors: -1}, {Timing: &Timing{HostBusWidth: 3, CPUBusWidth: 2}}, {Timing: &Timing{}}, {InlineMax: -1}} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
}

// blockingDev blocks every ReadAt until release is closed.
type blockingDev struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (d *blockingDev) ReadAt(p []byte, off int64) (int, error) {
	d.once.Do(func() { close(d.entered) })
	<-d.release
	clear(p)
	return len(p), nil
}

func TestBusyAndClose(t *testing.T) {
	for _, m := range []Mode{Streaming, StoreAndForward} {
		e := mustEngine(t, Config{Mode: m})
		e.SetRegions(make([]byte, 8192))
		dev := &blockingDev{entered: make(chan struct{}), release: make(chan struct{})}
		errc := make(chan error)
		go func() { errc <- e.DeviceToHost(dev, 0, 8192) }()
		<-dev.entered
		if err := e.DeviceToHost(newDev(make([]byte, 8192)), 0, 8192); !errors.Is(err, ErrBusy) {
			t.Fatalf("%v: concurrent transfer: %v, want ErrBusy", m, err)
		}
		closed := make(chan struct{})
		go func() { e.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatalf("%v: Close returned while a backend call was in progress", m)
		case <-time.After(20 * time.Millisecond):
		}
		close(dev.release)
		<-closed
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("%v: transfer aborted by Close: %v, want ErrClosed", m, err)
		}
		if err := e.DeviceToHost(newDev(make([]byte, 8192)), 0, 8192); !errors.Is(err, ErrClosed) {
			t.Fatalf("%v: after Close: %v", m, err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadPRD(t *testing.T) {
	// 1 MiB of host memory at physical 0x100000: a PRD table at 0x100040,
	// a 64 KiB read scattered into three buffers, one across a 64 KiB
	// boundary.
	mem := Memory{Base: 0x100000, Bytes: make([]byte, 1<<20)}
	segs := []Segment{{0x10f000, 0x3000}, {0x140000, 0xc000}, {0x180200, 0x1000}}
	table, err := BuildTable(nil, segs...)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := AppendTable(nil, table)
	copy(mem.Bytes[0x40:], b)
	e := mustEngine(t, Config{})
	defer e.Close()
	if err := e.LoadPRD(mem, 0x100040); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(table, e.Table()); diff != "" {
		t.Fatalf("Table (-want +got):\n%s", diff)
	}
	const n = 0x10000
	if err := ValidateTable(e.Table(), n); err != nil {
		t.Fatal(err)
	}
	data := pattern(n, 9)
	if err := e.DeviceToHost(newDev(data), 0, n); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, s := range segs {
		got = append(got, mem.Bytes[s.Addr-mem.Base:][:s.Len]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the read did not land in the PRD regions")
	}

	for _, tc := range []struct {
		name string
		ptr  uint32
		want error
	}{
		{"misaligned pointer", 0x100042, ErrTablePointer},
		{"pointer below memory", 0x0ffff0, ErrAddress},
		{"pointer past memory", 0x200000, ErrAddress},
		{"no table there", 0x100400, ErrRegionSize}, // zeroed memory: count 0 = 64 KiB at 0, no EOT
	} {
		err := e.LoadPRD(mem, tc.ptr)
		if tc.name == "no table there" {
			if !errors.Is(err, ErrNoEOT) {
				t.Errorf("%s: %v, want ErrNoEOT", tc.name, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if e.Memory().NumRegions() != 0 {
			t.Errorf("%s: a failed LoadPRD left host memory programmed", tc.name)
		}
	}
	// A region outside host memory.
	out, _ := AppendTable(nil, []PRD{{Addr: 0x300000, Len: 512, EOT: true}})
	copy(mem.Bytes[0x80:], out)
	if err := e.LoadPRD(mem, 0x100080); !errors.Is(err, ErrAddress) {
		t.Errorf("region outside memory: %v", err)
	}
}

// TestNoAllocs pins the steady state at zero allocations per transfer, the
// worker goroutine included.
func TestNoAllocs(t *testing.T) {
	const n = 64 << 10
	for _, mc := range []struct {
		m      Mode
		spin   time.Duration
		inline int64
	}{{Streaming, 0, 0}, {Streaming, -1, 0}, {Streaming, 0, n}, {StoreAndForward, 0, 0}} {
		m := mc.m
		tm := PaperAfter()
		for _, timing := range []*Timing{nil, &tm} {
			var seen []byte
			var tap io.Writer = crc32.NewIEEE()
			if timing != nil {
				tap = &recordingCopyTap{seen: &seen}
			}
			e := mustEngine(t, Config{Mode: m, Timing: timing, Clock: &VirtualClock{}, Tap: tap, Spin: mc.spin, InlineMax: mc.inline})
			host := make([]byte, n)
			e.SetRegions(host[:n/2], host[n/2:])
			dev := bytes.NewReader(make([]byte, n))
			wdev := newDev(make([]byte, n))
			run := func() {
				seen = seen[:0]
				if err := e.DeviceToHost(dev, 0, n); err != nil {
					t.Fatal(err)
				}
				if err := e.HostToDevice(wdev, 0, n); err != nil {
					t.Fatal(err)
				}
			}
			run()
			if a := allocs.PerRun(1000, run); a > allocs.Slack {
				t.Errorf("%v, spin %v, inline %d, timing %v: %v allocations per transfer pair", m, mc.spin, mc.inline, timing != nil, a)
			}
			e.Close()
		}
	}
}

// The seam with package ata, restated here so that dma need not import it:
// the Engine has the methods of ata.DMA and ata.BusMaster.
var (
	_ interface {
		DeviceToHost(src io.ReaderAt, off, n int64) error
		HostToDevice(dst io.WriterAt, off, n int64) error
	} = (*Engine)(nil)
	_ interface{ Prepare(buf []byte) error } = (*Engine)(nil)
)

func TestPrepare(t *testing.T) {
	e := mustEngine(t, Config{})
	defer e.Close()
	host := make([]byte, 1024)
	if err := e.Prepare(host); err != nil {
		t.Fatal(err)
	}
	data := pattern(1024, 4)
	if err := e.DeviceToHost(newDev(data), 0, 1024); err != nil || !bytes.Equal(host, data) {
		t.Fatalf("read into the prepared buffer: %v", err)
	}
}

func TestTableFollowsProgramming(t *testing.T) {
	mem := Memory{Base: 0, Bytes: make([]byte, 1<<17)}
	b, _ := AppendTable(nil, []PRD{{Addr: 0x10000, Len: 1024, EOT: true}})
	copy(mem.Bytes, b)
	e := mustEngine(t, Config{})
	defer e.Close()
	if err := e.LoadPRD(mem, 0); err != nil || len(e.Table()) != 1 || e.Memory().Len() != 1024 {
		t.Fatalf("LoadPRD: %v, table %v", err, e.Table())
	}
	e.SetRegions(make([]byte, 512))
	if len(e.Table()) != 0 || e.Memory().Len() != 512 {
		t.Fatalf("after SetRegions: table %v, memory %d bytes", e.Table(), e.Memory().Len())
	}
}

// TestWorkerParks: between transfers far apart the worker parks, and the
// next transfer wakes it.
// With a negative Spin both sides park at once, every hand-off a wake-up.
func TestWorkerParks(t *testing.T) {
	for _, spin := range []time.Duration{0, -1, 50 * time.Microsecond} {
		e := mustEngine(t, Config{Spin: spin, FIFOBlocks: 4, ChunkSectors: 2})
		host := make([]byte, 4096)
		e.SetRegions(host)
		for i := range 3 {
			data := pattern(4096, byte(i))
			if err := e.DeviceToHost(newDev(data), 0, 4096); err != nil || !bytes.Equal(host, data) {
				t.Fatalf("spin %v, transfer %d: %v", spin, i, err)
			}
			if err := e.HostToDevice(newDev(make([]byte, 4096)), 0, 4096); err != nil {
				t.Fatalf("spin %v, write %d: %v", spin, i, err)
			}
			time.Sleep(5 * time.Millisecond) // far beyond the worker's spin
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNamesAndClocks(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Streaming.String(), "streaming"}, {StoreAndForward.String(), "store-and-forward"}, {Mode(9).String(), "Mode(9)"},
		{ToHost.String(), "to-host"}, {ToDevice.String(), "to-device"}, {Direction(0).String(), "Direction(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	var w WallClock // the zero value counts from its first Now
	a := w.Now()
	w.AdvanceTo(time.Hour) // ignored
	if b := w.Now(); b < a || b > time.Minute {
		t.Fatalf("wall clock went from %v to %v", a, b)
	}
	var v VirtualClock
	v.AdvanceTo(5 * time.Second)
	v.AdvanceTo(time.Second) // never back
	v.Advance(time.Millisecond)
	if v.Now() != 5*time.Second+time.Millisecond {
		t.Fatalf("virtual clock at %v", v.Now())
	}
	e := mustEngine(t, Config{Mode: StoreAndForward})
	defer e.Close()
	if e.Mode() != StoreAndForward || (Transfer{}).CopiesPerByte() != 0 {
		t.Fatal("Mode or CopiesPerByte")
	}
	l := NewSGList([]byte("ab"), []byte("cd"))
	if string(l.Region(1)) != "cd" {
		t.Fatal("Region")
	}
}

// recordingCopyTap is a CopyTap that records what it sees.
type recordingCopyTap struct {
	seen   *[]byte
	writes int
}

func (r *recordingCopyTap) Write(p []byte) (int, error) {
	r.writes++
	*r.seen = append(*r.seen, p...)
	return len(p), nil
}

func (r *recordingCopyTap) CopyAndWrite(dst, src []byte) int {
	if len(dst) < len(src) {
		panic("dst shorter than src")
	}
	copy(dst, src)
	*r.seen = append(*r.seen, src...)
	return len(src)
}

// TestCopyTap: a tap that can copy does the engine's copy, once per byte, in
// order, and is never asked to Write.
func TestCopyTap(t *testing.T) {
	const n = 24 * SectorSize
	for _, m := range []Mode{Streaming, StoreAndForward} {
		var seen []byte
		tap := &recordingCopyTap{seen: &seen}
		e := mustEngine(t, Config{Mode: m, Tap: tap, FIFOBlocks: 8, ChunkSectors: 4})
		host := [][]byte{make([]byte, 1000), make([]byte, 3000), make([]byte, n-4000)}
		e.SetRegions(host...)
		data := pattern(n, 8)
		if err := e.DeviceToHost(newDev(data), 0, n); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(concat(host), data) || !bytes.Equal(seen, data) {
			t.Fatalf("%v read: host or tap differ from the device", m)
		}
		seen = seen[:0]
		dev := newDev(make([]byte, n))
		if err := e.HostToDevice(dev, 0, n); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dev.b, data) || !bytes.Equal(seen, data) {
			t.Fatalf("%v write: device or tap differ from host memory", m)
		}
		if tap.writes != 0 || e.Last().CopiesPerByte() != 1 {
			t.Fatalf("%v: %d Writes, %v copies per byte", m, tap.writes, e.Last().CopiesPerByte())
		}
		e.Close()
	}
}

// TestInlineModelledTime: with a Timing profile, a transfer run inline
// (InlineMax) is modelled as the hardware would take it, overlap included:
// the same modelled time, interrupts and data as on the worker.
func TestInlineModelledTime(t *testing.T) {
	const n = 64 << 10
	for _, timing := range []Timing{PaperAfter(), PaperBefore()} {
		for _, read := range []bool{true, false} {
			var got [2]Transfer
			var data [2][]byte
			for i, inline := range []int64{0, n} {
				e := mustEngine(t, Config{Clock: &VirtualClock{}, Timing: &timing, FIFOBlocks: 8, ChunkSectors: 2, InlineMax: inline})
				host := pattern(n, 3)
				e.SetRegions(host)
				dev := newDev(pattern(n, 5))
				var err error
				if read {
					err = e.DeviceToHost(dev, 0, n)
				} else {
					err = e.HostToDevice(dev, 0, n)
				}
				if err != nil {
					t.Fatal(err)
				}
				got[i] = e.Last()
				data[i] = append(host, dev.b...)
				e.Close()
			}
			if !got[1].Inline || got[0].Inline {
				t.Fatalf("Inline = %v on the worker, %v inline", got[0].Inline, got[1].Inline)
			}
			got[1].Inline = false
			if diff := cmp.Diff(got[0], got[1]); diff != "" {
				t.Errorf("read=%v: inline transfer differs (-worker +inline):\n%s", read, diff)
			}
			if !bytes.Equal(data[0], data[1]) {
				t.Errorf("read=%v: inline transfer moved other data", read)
			}
		}
	}
}

// asyncDev is a memDev that keeps reads and writes in flight
// (AsyncReaderAt, AsyncWriterAt). A request does its I/O only when it is
// waited for, so an engine that used a read's data, or reused a write's
// buffer, before waiting would move the wrong bytes. Once a request fails,
// the ones still in flight fail too without touching the device, like
// requests behind a failed one on a dead connection; the next request
// started with none in flight starts afresh. A Wait of a handle not in
// flight is counted in misuse (and fails).
type asyncDev struct {
	*memDev
	reqs     []asyncReq // by handle-1; handles are never reused
	inflight int
	failed   bool
	misuse   int
}

type asyncReq struct {
	write bool
	p     []byte
	off   int64
	done  bool
}

func (d *asyncDev) start(write bool, p []byte, off int64) (Handle, error) {
	if d.inflight == 0 {
		d.failed = false
	}
	d.reqs = append(d.reqs, asyncReq{write: write, p: p, off: off})
	d.inflight++
	return Handle(len(d.reqs)), nil
}

func (d *asyncDev) StartReadAt(_ context.Context, p []byte, off int64) (Handle, error) {
	return d.start(false, p, off)
}

func (d *asyncDev) StartWriteAt(_ context.Context, p []byte, off int64) (Handle, error) {
	return d.start(true, p, off)
}

func (d *asyncDev) Wait(_ context.Context, h Handle) error {
	if h == 0 || h > Handle(len(d.reqs)) || d.reqs[h-1].done {
		d.misuse++
		return fmt.Errorf("asyncDev: handle %d not in flight", h)
	}
	r := &d.reqs[h-1]
	r.done = true
	d.inflight--
	if d.failed {
		return errors.New("asyncDev: a request before this one failed")
	}
	var err error
	if r.write {
		_, err = d.memDev.WriteAt(r.p, r.off)
	} else {
		var m int
		m, err = d.memDev.ReadAt(r.p, r.off)
		if m == len(r.p) {
			err = nil
		} else if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		d.failed = true
	}
	return err
}

// refusingDev is an asyncDev that refuses to start its second request.
type refusingDev struct {
	asyncDev
	starts int
}

var errRefused = errors.New("refused")

func (d *refusingDev) StartReadAt(ctx context.Context, p []byte, off int64) (Handle, error) {
	if d.starts++; d.starts == 2 {
		return 0, errRefused
	}
	return d.asyncDev.StartReadAt(ctx, p, off)
}

func (d *refusingDev) StartWriteAt(ctx context.Context, p []byte, off int64) (Handle, error) {
	if d.starts++; d.starts == 2 {
		return 0, errRefused
	}
	return d.asyncDev.StartWriteAt(ctx, p, off)
}

// TestAsyncStartError: a device that cannot start a request fails the
// transfer after the chunks before it have moved (and been waited for), in
// both directions.
func TestAsyncStartError(t *testing.T) {
	const n = 8 * SectorSize
	for _, read := range []bool{true, false} {
		e := mustEngine(t, Config{FIFOBlocks: 8, ChunkSectors: 2, InlineMax: n})
		host := pattern(n, 1)
		e.SetRegions(host)
		dev := &refusingDev{asyncDev: asyncDev{memDev: newDev(pattern(n, 2))}}
		var err error
		if read {
			err = e.DeviceToHost(dev, 0, n)
		} else {
			err = e.HostToDevice(dev, 0, n)
		}
		if !errors.Is(err, errRefused) {
			t.Errorf("read=%v: %v, want the refusal", read, err)
		}
		if dev.inflight != 0 || dev.misuse != 0 {
			t.Errorf("read=%v: %d requests left in flight, %d waits of a handle not in flight", read, dev.inflight, dev.misuse)
		}
		if got := e.Last().Bytes; got != 2*SectorSize {
			t.Errorf("read=%v: %d bytes moved, want the first chunk's %d", read, got, 2*SectorSize)
		}
		// The engine is still usable.
		if err := e.DeviceToHost(newDev(pattern(n, 3)), 0, n); err != nil || !bytes.Equal(host, pattern(n, 3)) {
			t.Errorf("read=%v: the next transfer: %v", read, err)
		}
		e.Close()
	}
}
