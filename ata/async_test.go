package ata_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/nbd"
)

// The interfaces of ata and dma are one method set, and an NBD client has
// it.
var (
	_ ata.AsyncReaderAt = (*nbd.Client)(nil)
	_ ata.AsyncWriterAt = (*nbd.Client)(nil)
	_ dma.AsyncReaderAt = ata.AsyncReaderAt(nil)
	_ ata.AsyncReaderAt = dma.AsyncReaderAt(nil)
	_ dma.AsyncWriterAt = ata.AsyncWriterAt(nil)
	_ ata.AsyncWriterAt = dma.AsyncWriterAt(nil)
)

// asyncDisk is a memDisk that keeps requests in flight (ata.AsyncReaderAt,
// ata.AsyncWriterAt): a request does its I/O when it is waited for, so an
// engine that used the data before the Wait would move the wrong bytes. A
// failed request reports where it failed with an *ata.OffsetError if
// exact is set, else with no position. Starting a request that covers
// sector refuseAt fails (refuseAt < 0: never). Waits of handles not in
// flight are counted in misuse.
type asyncDisk struct {
	*memDisk
	exact    bool
	refuseAt int64
	reqs     []asyncReq
	inflight int
	started  int
	misuse   int
}

type asyncReq struct {
	write bool
	p     []byte
	off   int64
	done  bool
}

var errRefused = errors.New("asyncDisk: request refused")

func newAsyncDisk(m *memDisk, exact bool) *asyncDisk {
	return &asyncDisk{memDisk: m, exact: exact, refuseAt: -1}
}

func (a *asyncDisk) start(write bool, p []byte, off int64) (uint64, error) {
	if s := a.refuseAt * a.sector; a.refuseAt >= 0 && off <= s && s < off+int64(len(p)) {
		return 0, errRefused
	}
	a.reqs = append(a.reqs, asyncReq{write: write, p: p, off: off})
	a.inflight++
	a.started++
	return uint64(len(a.reqs)), nil
}

func (a *asyncDisk) StartReadAt(_ context.Context, p []byte, off int64) (uint64, error) {
	return a.start(false, p, off)
}

func (a *asyncDisk) StartWriteAt(_ context.Context, p []byte, off int64) (uint64, error) {
	return a.start(true, p, off)
}

func (a *asyncDisk) Wait(_ context.Context, h uint64) error {
	if h == 0 || h > uint64(len(a.reqs)) || a.reqs[h-1].done {
		a.misuse++
		return fmt.Errorf("asyncDisk: handle %d not in flight", h)
	}
	r := &a.reqs[h-1]
	r.done = true
	a.inflight--
	var m int
	var err error
	if r.write {
		m, err = a.memDisk.WriteAt(r.p, r.off)
	} else {
		m, err = a.memDisk.ReadAt(r.p, r.off)
	}
	if err != nil && a.exact {
		err = &ata.OffsetError{Off: r.off + int64(m), Err: err}
	}
	return err
}

// deferDisk is a write-behind cache in miniature: a write to sector
// trigger succeeds but reports that an earlier write, of sector failed,
// did not complete; so does a flush.
type deferDisk struct {
	*memDisk
	trigger, failed int64
	failFlush       bool
}

func (d *deferDisk) deferred() error {
	return fmt.Errorf("cache: %w", &ata.OffsetError{Off: d.failed * 512, Err: errInjected})
}

func (d *deferDisk) WriteAt(p []byte, off int64) (int, error) {
	if s := d.trigger * 512; off <= s && s < off+int64(len(p)) {
		return 0, d.deferred()
	}
	return d.memDisk.WriteAt(p, off)
}

func (d *deferDisk) Flush(ctx context.Context) error {
	if d.failFlush {
		return d.deferred()
	}
	return d.memDisk.Flush(ctx)
}

// engines are the DMA engines a command's data can go through: every
// path of package dma's Engine (inline in chunks smaller than the
// transfer, on its worker, store-and-forward) and ata.BufferDMA.
var engines = []struct {
	name   string
	inline bool // the engine keeps an async backend's requests in flight
	new    func(t *testing.T, tap io.Writer) (ata.DMA, ata.BusMaster)
}{
	{"BufferDMA", false, func(t *testing.T, _ io.Writer) (ata.DMA, ata.BusMaster) {
		e := &ata.BufferDMA{}
		return e, e
	}},
	{"dma inline", true, func(t *testing.T, tap io.Writer) (ata.DMA, ata.BusMaster) {
		return newEngine(t, dma.Config{FIFOBlocks: 8, ChunkSectors: 4, InlineMax: 1 << 20, Tap: tap})
	}},
	{"dma worker", false, func(t *testing.T, tap io.Writer) (ata.DMA, ata.BusMaster) {
		return newEngine(t, dma.Config{FIFOBlocks: 8, ChunkSectors: 4, Tap: tap})
	}},
	{"dma store-and-forward", false, func(t *testing.T, tap io.Writer) (ata.DMA, ata.BusMaster) {
		return newEngine(t, dma.Config{Mode: dma.StoreAndForward, Tap: tap})
	}},
}

func newEngine(t *testing.T, c dma.Config) (*dma.Engine, *dma.Engine) {
	t.Helper()
	e, err := dma.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, e
}

// TestBackendErrorsReachRegisters runs failing DMA reads and writes
// through the registers (ata.Host) on every engine path, over a backend
// with and without AsyncReaderAt/AsyncWriterAt, and checks what the host
// sees: UNC for a read, DF|ERR with ABRT for a write, and the failing
// sector in the LBA registers.
func TestBackendErrorsReachRegisters(t *testing.T) {
	const lba, count = 100, 16 // 4 chunks of 4 sectors
	const errStatus, dfStatus = ata.StatusDRDY | ata.StatusERR, ata.StatusDRDY | ata.StatusDF | ata.StatusERR
	type backendKind int
	const (
		syncDisk backendKind = iota
		asyncExact
		asyncNoPos
	)
	kinds := map[backendKind]string{syncDisk: "sync", asyncExact: "async, OffsetError", asyncNoPos: "async, no position"}
	tests := []struct {
		name      string
		write     bool
		badRead   int64 // sector, or -1
		badWrite  int64
		refuseAt  int64 // async start refused at this sector, or -1
		deferred  [2]int64
		status    ata.Status
		err       ata.ErrorBits
		wantLBA   int64 // sync backends and exact async ones
		noPosLBA  int64 // async backends without a position, inline
		asyncOnly bool  // needs an engine keeping requests in flight
	}{
		{name: "read fails", badRead: 106, badWrite: -1, refuseAt: -1, status: errStatus, err: ata.ErrorUNC, wantLBA: 106, noPosLBA: 104},
		{name: "read fails at the first sector", badRead: 100, badWrite: -1, refuseAt: -1, status: errStatus, err: ata.ErrorUNC, wantLBA: 100, noPosLBA: 100},
		{name: "read fails at the last sector", badRead: 115, badWrite: -1, refuseAt: -1, status: errStatus, err: ata.ErrorUNC, wantLBA: 115, noPosLBA: 112},
		{name: "write fails", write: true, badRead: -1, badWrite: 109, refuseAt: -1, status: dfStatus, err: ata.ErrorABRT, wantLBA: 109, noPosLBA: 108},
		{name: "write reports a deferred failure", write: true, badRead: -1, badWrite: -1, refuseAt: -1, deferred: [2]int64{110, 7}, status: dfStatus, err: ata.ErrorABRT, wantLBA: 7, noPosLBA: 7},
		{name: "read start refused", badRead: -1, badWrite: -1, refuseAt: 109, status: errStatus, err: ata.ErrorUNC, wantLBA: 108, noPosLBA: 108, asyncOnly: true},
		{name: "write start refused", write: true, badRead: -1, badWrite: -1, refuseAt: 105, status: dfStatus, err: ata.ErrorABRT, wantLBA: 104, noPosLBA: 104, asyncOnly: true},
	}
	for _, eng := range engines {
		for kind := syncDisk; kind <= asyncNoPos; kind++ {
			for _, tt := range tests {
				if tt.asyncOnly && (kind == syncDisk || !eng.inline) {
					continue // nothing starts requests: nothing to refuse
				}
				if tt.deferred != [2]int64{} && kind != syncDisk {
					continue // the deferred-failure backend is synchronous
				}
				t.Run(eng.name+"/"+kinds[kind]+"/"+tt.name, func(t *testing.T) {
					mem := newMemDisk(1024, 512)
					for i := range mem.data {
						mem.data[i] = byte(i / 512)
					}
					if tt.badRead >= 0 {
						mem.badRead[tt.badRead] = true
					}
					if tt.badWrite >= 0 {
						mem.badWrite[tt.badWrite] = true
					}
					var backend ata.Backend = mem
					if tt.deferred != [2]int64{} {
						backend = &deferDisk{memDisk: mem, trigger: tt.deferred[0], failed: tt.deferred[1]}
					}
					var ad *asyncDisk
					if kind != syncDisk {
						ad = newAsyncDisk(mem, kind == asyncExact)
						ad.refuseAt = tt.refuseAt
						backend = ad
					}
					engine, bm := eng.new(t, nil)
					d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: backend, DMA: engine})
					if err != nil {
						t.Fatal(err)
					}
					h := attach(t, d, bm)
					op := ata.CmdReadDMAExt
					if tt.write {
						op = ata.CmdWriteDMAExt
					}
					c := ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: lba, Count: count}
					buf := bytes.Repeat([]byte{0xEE}, count*512)
					e := ataErr(t, h.Exec(&c, buf))
					want := tt.wantLBA
					if kind == asyncNoPos && eng.inline {
						want = tt.noPosLBA
					}
					if e.Status != tt.status || e.Err != tt.err || e.LBA != uint64(want) {
						t.Errorf("status %v error %v LBA %d, want %v %v %d (backend: %v)", e.Status, e.Err, e.LBA, tt.status, tt.err, want, d.BackendErr())
					}
					if d.BackendErr() == nil {
						t.Error("BackendErr is nil")
					}
					if ad != nil {
						if ad.inflight != 0 || ad.misuse != 0 {
							t.Errorf("%d requests left in flight, %d waits of handles not in flight", ad.inflight, ad.misuse)
						}
						if eng.inline != (ad.started > 0) {
							t.Errorf("%d async requests started; the engine keeps them in flight: %v", ad.started, eng.inline)
						}
					}
					if !tt.write && tt.badRead > lba {
						// The sectors before the failing one reached the
						// host (those before the failing chunk, where
						// nothing says where in it).
						moved := int(tt.badRead - lba)
						if kind == asyncNoPos && eng.inline || kind == asyncExact && eng.inline {
							moved = int(tt.noPosLBA - lba)
						}
						if eng.name == "BufferDMA" {
							moved = 0 // one ReadAt, which failed
						}
						for s := range moved {
							if buf[s*512] != byte(lba+s) {
								t.Fatalf("sector %d not moved before the failure", lba+s)
							}
						}
					}
				})
			}
		}
	}
}

// TestAsyncBackendRoundTrip: an inline engine moves whole commands through
// an async backend by requests in flight, and a command after a failed one
// works.
func TestAsyncBackendRoundTrip(t *testing.T) {
	mem := newMemDisk(1024, 512)
	ad := newAsyncDisk(mem, true)
	engine, bm := newEngine(t, dma.Config{FIFOBlocks: 8, ChunkSectors: 4, InlineMax: 1 << 20})
	d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: ad, DMA: engine})
	if err != nil {
		t.Fatal(err)
	}
	h := attach(t, d, bm)
	h.Mode = ata.RWDMA
	data := make([]byte, 32*512)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := h.WriteAt(data, 10*512); err != nil {
		t.Fatal(err)
	}
	mem.badRead[50] = true
	got := make([]byte, len(data))
	if _, err := h.ReadAt(got, 40*512); !errors.Is(err, ata.ErrUncorrectable) {
		t.Fatalf("read over a bad sector: %v", err)
	}
	if _, err := h.ReadAt(got, 10*512); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back other bytes than written")
	}
	if ad.started < 2*32/4 || ad.inflight != 0 || ad.misuse != 0 {
		t.Errorf("%d requests started, %d left in flight, %d misused handles", ad.started, ad.inflight, ad.misuse)
	}
}

// TestEngineOwnErrorIsABRT: an error of the engine's own (its tap, a host
// buffer too short) ends the command in ABRT, without DF or UNC, on every
// path, whatever the backend.
func TestEngineOwnErrorIsABRT(t *testing.T) {
	errTap := errors.New("tap refused")
	for _, eng := range engines {
		for _, async := range []bool{false, true} {
			for _, write := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/async=%v/write=%v", eng.name, async, write), func(t *testing.T) {
					mem := newMemDisk(1024, 512)
					var backend ata.Backend = mem
					var ad *asyncDisk
					if async {
						ad = newAsyncDisk(mem, true)
						backend = ad
					}
					engine, bm := eng.new(t, failingTap{errTap})
					d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: backend, DMA: engine})
					if err != nil {
						t.Fatal(err)
					}
					op := ata.CmdReadDMAExt
					if write {
						op = ata.CmdWriteDMAExt
					}
					buf := make([]byte, 16*512)
					if eng.name == "BufferDMA" {
						buf = buf[:8*512] // the engine's own error: too short
					}
					if err := bm.Prepare(buf); err != nil {
						t.Fatal(err)
					}
					issue(d, ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: 100, Count: 16})
					if d.Status() != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorABRT {
						t.Errorf("status %v error %v, want DRDY|ERR ABRT (backend: %v)", d.Status(), d.Error(), d.BackendErr())
					}
					if d.BackendErr() == nil {
						t.Error("BackendErr is nil")
					}
					if ad != nil && (ad.inflight != 0 || ad.misuse != 0) {
						t.Errorf("%d requests left in flight, %d misused handles", ad.inflight, ad.misuse)
					}
				})
			}
		}
	}
}

type failingTap struct{ err error }

func (f failingTap) Write([]byte) (int, error) { return 0, f.err }

// TestFlushReportsDeferredWrite: a flush (FLUSH CACHE, or the one after a
// FUA write) whose error carries an *ata.OffsetError ends in DF|ERR with
// ABRT and the LBA of the write that failed; a plain flush error has none
// to give.
func TestFlushReportsDeferredWrite(t *testing.T) {
	for _, tt := range []struct {
		name string
		cmd  ata.Command
		buf  int
	}{
		{"FLUSH CACHE EXT", ata.Command{Op: ata.CmdFlushCacheExt, Device: ata.DeviceLBA}, 0},
		{"WRITE DMA FUA EXT", ata.Command{Op: ata.CmdWriteDMAFUAExt, Addressing: ata.AddrLBA48, LBA: 20, Count: 2}, 1024},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dd := &deferDisk{memDisk: newMemDisk(1024, 512), trigger: -1, failed: 77, failFlush: true}
			e := &ata.BufferDMA{}
			d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: dd, DMA: e})
			if err != nil {
				t.Fatal(err)
			}
			h := attach(t, d, e)
			c := tt.cmd
			got := ataErr(t, h.Exec(&c, make([]byte, tt.buf)))
			want := &ata.Error{Op: c.Op, Status: ata.StatusDRDY | ata.StatusDF | ata.StatusERR, Err: ata.ErrorABRT, LBA: 77}
			if *got != *want {
				t.Errorf("got %+v, want %+v", got, want)
			}
			var oe *ata.OffsetError
			if !errors.As(d.BackendErr(), &oe) || !errors.Is(d.BackendErr(), errInjected) || oe.Off != 77*512 {
				t.Errorf("BackendErr %v", d.BackendErr())
			}
		})
	}
}

// TestPIOErrorsReachRegisters: the PIO path reports the same: UNC at the
// failing sector of a read, DF|ERR ABRT at the sector an OffsetError
// names.
func TestPIOErrorsReachRegisters(t *testing.T) {
	mem := newMemDisk(1024, 512)
	mem.badRead[33] = true
	dd := &deferDisk{memDisk: mem, trigger: 40, failed: 5}
	d, err := ata.NewDevice(ata.Config{Info: plainInfo(1024), Backend: dd})
	if err != nil {
		t.Fatal(err)
	}
	h := attach(t, d, nil)
	read := ata.Command{Op: ata.CmdReadSectorsExt, Addressing: ata.AddrLBA48, LBA: 30, Count: 8}
	got := ataErr(t, h.Exec(&read, make([]byte, 8*512)))
	if got.Err != ata.ErrorUNC || got.LBA != 33 {
		t.Errorf("read: %v, want UNC at 33", got)
	}
	write := ata.Command{Op: ata.CmdWriteSectorsExt, Addressing: ata.AddrLBA48, LBA: 38, Count: 4}
	got = ataErr(t, h.Exec(&write, make([]byte, 4*512)))
	if got.Status != ata.StatusDRDY|ata.StatusDF|ata.StatusERR || got.Err != ata.ErrorABRT || got.LBA != 5 {
		t.Errorf("write: %v, want DF ABRT at 5", got)
	}
}

// ringAsync is an async backend over a memDisk that allocates nothing: a
// fixed ring of requests, done when waited for.
type ringAsync struct {
	*memDisk
	starts int
	reqs   [16]struct {
		write bool
		p     []byte
		off   int64
		gen   uint32
		live  bool
	}
}

func (r *ringAsync) start(write bool, p []byte, off int64) (uint64, error) {
	for i := range r.reqs {
		if q := &r.reqs[i]; !q.live {
			q.gen++
			r.starts++
			q.write, q.p, q.off, q.live = write, p, off, true
			return uint64(q.gen)<<32 | uint64(i+1), nil
		}
	}
	return 0, errors.New("ringAsync: full")
}

func (r *ringAsync) StartReadAt(_ context.Context, p []byte, off int64) (uint64, error) {
	return r.start(false, p, off)
}

func (r *ringAsync) StartWriteAt(_ context.Context, p []byte, off int64) (uint64, error) {
	return r.start(true, p, off)
}

var errRingHandle = errors.New("ringAsync: handle not in flight")

func (r *ringAsync) Wait(_ context.Context, h uint64) error {
	i := int(uint32(h)) - 1
	if i < 0 || i >= len(r.reqs) || !r.reqs[i].live || r.reqs[i].gen != uint32(h>>32) {
		return errRingHandle
	}
	q := &r.reqs[i]
	q.live = false
	var err error
	if q.write {
		_, err = r.memDisk.WriteAt(q.p, q.off)
	} else {
		_, err = r.memDisk.ReadAt(q.p, q.off)
	}
	return err
}

// A DMA command through an inline engine to an async backend allocates
// nothing in steady state: the device's request table is reused.
func TestAsyncDMAAllocs(t *testing.T) {
	engine, err := dma.New(dma.Config{FIFOBlocks: 64, ChunkSectors: 16, InlineMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	engine.SetRegions(make([]byte, 128*512))
	ra := &ringAsync{memDisk: newMemDisk(benchSectors, 512)}
	d, err := ata.NewDevice(ata.Config{Info: testInfo(benchSectors), Backend: ra, DMA: engine})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []ata.Opcode{ata.CmdReadDMAExt, ata.CmdWriteDMAExt} {
		tf := readDMAExt64K
		tf.Command = op
		run := func() {
			d.Issue(&tf)
			d.ReadReg(ata.RegStatus)
		}
		run()
		if nallocs := allocs.PerRun(1000, run); nallocs > allocs.Slack {
			t.Errorf("%v: %v allocations per command, want 0", op, nallocs)
		}
		if !d.Status().OK() || ra.starts == 0 {
			t.Errorf("%v: status %v, %d requests started (%v)", op, d.Status(), ra.starts, d.BackendErr())
		}
	}
}
