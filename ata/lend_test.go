package ata_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/dma"
)

// The lending interfaces of ata and dma are one method set.
var (
	_ dma.PeekReaderAt    = ata.PeekReaderAt(nil)
	_ ata.PeekReaderAt    = dma.PeekReaderAt(nil)
	_ dma.ReserveWriterAt = ata.ReserveWriterAt(nil)
	_ ata.ReserveWriterAt = dma.ReserveWriterAt(nil)
)

// lendDisk is a memDisk that lends its buffer (ata.PeekReaderAt,
// ata.ReserveWriterAt), piece bytes at a time. A failed loan reports where
// it failed with an *ata.OffsetError if exact is set, else with no
// position. A ReserveAt of sector trigger reports that an earlier write,
// of sector failed, did not complete. The buffer is overwritten when a
// loan ends, so an engine that used it after would move the wrong bytes.
// Misuse (a second loan, an end of none) is counted.
type lendDisk struct {
	*memDisk
	piece           int
	exact           bool
	trigger, failed int64 // sectors; trigger < 0: never
	buf             []byte
	off             int64
	lent            int // 0 none, 1 peek, 2 reserve
	loans, misuse   int
}

func newLendDisk(m *memDisk, piece int, exact bool) *lendDisk {
	return &lendDisk{memDisk: m, piece: piece, exact: exact, trigger: -1, buf: make([]byte, piece)}
}

func (l *lendDisk) where(off int64, m int, err error) error {
	if l.exact {
		return &ata.OffsetError{Off: off + int64(m), Err: err}
	}
	return err
}

func (l *lendDisk) PeekAt(off int64, n int) ([]byte, error) {
	if l.lent != 0 {
		l.misuse++
		return nil, errors.New("lendDisk: second loan")
	}
	p := l.buf[:min(n, l.piece)]
	if m, err := l.memDisk.ReadAt(p, off); err != nil {
		return nil, l.where(off, m, err)
	}
	l.lent, l.off = 1, off
	l.loans++
	return p, nil
}

func (l *lendDisk) ReleasePeek() {
	if l.lent != 1 {
		l.misuse++
	}
	l.lent = 0
	for i := range l.buf {
		l.buf[i] = 0xEE
	}
}

func (l *lendDisk) ReserveAt(off int64, n int) ([]byte, error) {
	if l.lent != 0 {
		l.misuse++
		return nil, errors.New("lendDisk: second loan")
	}
	if s := l.trigger * 512; l.trigger >= 0 && off <= s && s < off+int64(n) {
		return nil, fmt.Errorf("cache: %w", &ata.OffsetError{Off: l.failed * 512, Err: errInjected})
	}
	l.lent, l.off = 2, off
	l.loans++
	for i := range l.buf {
		l.buf[i] = 0xEE
	}
	return l.buf[:min(n, l.piece)], nil
}

func (l *lendDisk) CommitReserved(m int) error {
	if l.lent != 2 {
		l.misuse++
	}
	l.lent = 0
	if m == 0 {
		return nil
	}
	if k, err := l.memDisk.WriteAt(l.buf[:m], l.off); err != nil {
		return l.where(l.off, k, err)
	}
	return nil
}

// lendEngines are the engines that borrow a lending backend's buffers:
// package dma's, streaming, inline or on its worker.
var lendEngines = map[string]bool{"dma inline": true, "dma worker": true}

// TestLendingRoundTrip: on every engine path a command's data reaches a
// lending backend and comes back, the streaming engines through loans of
// the backend's buffer (returned, each once), the others through ReadAt
// and WriteAt.
func TestLendingRoundTrip(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			mem := newMemDisk(1024, 512)
			ld := newLendDisk(mem, 3*512, true)
			engine, bm := eng.new(t, nil)
			d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: ld, DMA: engine})
			if err != nil {
				t.Fatal(err)
			}
			h := attach(t, d, bm)
			h.Mode = ata.RWDMA
			data := make([]byte, 16*512)
			for i := range data {
				data[i] = byte(i * 7)
			}
			if _, err := h.WriteAt(data, 10*512); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mem.data[10*512:26*512], data) {
				t.Fatal("the backend holds other bytes than written")
			}
			got := make([]byte, len(data))
			if _, err := h.ReadAt(got, 10*512); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("read back other bytes than written")
			}
			want := 0
			if lendEngines[eng.name] {
				want = 2 * 6 // 16 sectors in loans of 3, each way
			}
			if ld.loans != want || ld.lent != 0 || ld.misuse != 0 {
				t.Errorf("%d loans (want %d), one left lent: %v, %d misused", ld.loans, want, ld.lent != 0, ld.misuse)
			}
		})
	}
}

// TestLendingErrorsReachRegisters: a failed loan ends the command as a
// failed ReadAt or WriteAt would, on the engines that borrow: UNC for a
// read, DF|ERR with ABRT for a write, with the failing sector (the
// OffsetError's, else the loan's first) in the LBA registers; no buffer
// stays lent.
func TestLendingErrorsReachRegisters(t *testing.T) {
	const lba, count = 100, 16 // loans of 4 sectors: 100, 104, 108, 112
	const errStatus, dfStatus = ata.StatusDRDY | ata.StatusERR, ata.StatusDRDY | ata.StatusDF | ata.StatusERR
	tests := []struct {
		name              string
		write             bool
		badRead, badWrite int64 // sectors, or -1
		trigger, failed   int64
		status            ata.Status
		err               ata.ErrorBits
		exactLBA, noPos   int64
	}{
		{"peek fails", false, 106, -1, -1, 0, errStatus, ata.ErrorUNC, 106, 104},
		{"peek fails at the last sector", false, 115, -1, -1, 0, errStatus, ata.ErrorUNC, 115, 112},
		{"commit fails", true, -1, 109, -1, 0, dfStatus, ata.ErrorABRT, 109, 108},
		{"reserve reports an earlier write", true, -1, -1, 105, 7, dfStatus, ata.ErrorABRT, 7, 7},
	}
	for _, name := range []string{"dma inline", "dma worker"} {
		for _, exact := range []bool{true, false} {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s/exact=%v/%s", name, exact, tt.name), func(t *testing.T) {
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
					ld := newLendDisk(mem, 4*512, exact)
					ld.trigger, ld.failed = tt.trigger, tt.failed
					var engine ata.DMA
					var bm ata.BusMaster
					for _, e := range engines {
						if e.name == name {
							engine, bm = e.new(t, nil)
						}
					}
					d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: ld, DMA: engine})
					if err != nil {
						t.Fatal(err)
					}
					h := attach(t, d, bm)
					op := ata.CmdReadDMAExt
					if tt.write {
						op = ata.CmdWriteDMAExt
					}
					c := ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: lba, Count: count}
					buf := bytes.Repeat([]byte{0xDD}, count*512)
					e := ataErr(t, h.Exec(&c, buf))
					want := tt.noPos
					if exact {
						want = tt.exactLBA
					}
					if e.Status != tt.status || e.Err != tt.err || e.LBA != uint64(want) {
						t.Errorf("status %v error %v LBA %d, want %v %v %d (backend: %v)", e.Status, e.Err, e.LBA, tt.status, tt.err, want, d.BackendErr())
					}
					if !errors.Is(d.BackendErr(), errInjected) {
						t.Errorf("BackendErr %v does not wrap the backend's", d.BackendErr())
					}
					if ld.lent != 0 || ld.misuse != 0 {
						t.Errorf("a buffer left lent: %v, %d misused", ld.lent != 0, ld.misuse)
					}
					if !tt.write {
						// The loans before the failing one reached the host.
						for s := range int(tt.noPos - lba) {
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

// TestLendingTapErrorIsABRT: the engine's own error during a loan (its
// tap) ends the command in ABRT, without DF or UNC, and gives the buffer
// back; a write's is committed empty.
func TestLendingTapErrorIsABRT(t *testing.T) {
	for _, write := range []bool{false, true} {
		t.Run(fmt.Sprintf("write=%v", write), func(t *testing.T) {
			mem := newMemDisk(1024, 512)
			ld := newLendDisk(mem, 4*512, true)
			engine, bm := newEngine(t, dma.Config{FIFOBlocks: 8, ChunkSectors: 4, InlineMax: 1 << 20, Tap: failingTap{errInjected}})
			d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: ld, DMA: engine})
			if err != nil {
				t.Fatal(err)
			}
			op := ata.CmdReadDMAExt
			if write {
				op = ata.CmdWriteDMAExt
			}
			if err := bm.Prepare(bytes.Repeat([]byte{0xDD}, 16*512)); err != nil {
				t.Fatal(err)
			}
			issue(d, ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: 100, Count: 16})
			if d.Status() != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorABRT {
				t.Errorf("status %v error %v, want DRDY|ERR ABRT (backend: %v)", d.Status(), d.Error(), d.BackendErr())
			}
			if ld.loans != 1 || ld.lent != 0 || ld.misuse != 0 {
				t.Errorf("%d loans, one left lent: %v, %d misused", ld.loans, ld.lent != 0, ld.misuse)
			}
			if len(mem.writes) != 0 {
				t.Errorf("the backend was written: %v", mem.writes)
			}
		})
	}
}

// funcDMA is a DMA engine that runs a test's function on the device's
// views of its backend.
type funcDMA struct {
	read  func(src io.ReaderAt, off, n int64) error
	write func(dst io.WriterAt, off, n int64) error
}

func (s *funcDMA) DeviceToHost(src io.ReaderAt, off, n int64) error { return s.read(src, off, n) }
func (s *funcDMA) HostToDevice(dst io.WriterAt, off, n int64) error { return s.write(dst, off, n) }

// TestTrackerLoans: the device's view of a lending backend refuses loans
// outside the transfer and a second loan before the first ends, and gives
// back a buffer an engine left lent, ending the command in ABRT.
func TestTrackerLoans(t *testing.T) {
	tests := []struct {
		name  string
		read  func(src io.ReaderAt, off, n int64) error
		write func(dst io.WriterAt, off, n int64) error
		loans int
	}{
		{name: "peek outside", loans: 0, read: func(src io.ReaderAt, off, n int64) error {
			_, err := src.(dma.PeekReaderAt).PeekAt(off+512, int(n))
			return err
		}},
		{name: "reserve outside", loans: 0, write: func(dst io.WriterAt, off, n int64) error {
			_, err := dst.(dma.ReserveWriterAt).ReserveAt(off-512, 512)
			return err
		}},
		{name: "peek left lent", loans: 1, read: func(src io.ReaderAt, off, n int64) error {
			_, err := src.(dma.PeekReaderAt).PeekAt(off, int(n))
			return err
		}},
		{name: "reserve left lent", loans: 1, write: func(dst io.WriterAt, off, n int64) error {
			_, err := dst.(dma.ReserveWriterAt).ReserveAt(off, int(n))
			return err
		}},
		{name: "second peek", loans: 1, read: func(src io.ReaderAt, off, n int64) error {
			pr := src.(dma.PeekReaderAt)
			if _, err := pr.PeekAt(off, 512); err != nil {
				return err
			}
			_, err := pr.PeekAt(off+512, 512)
			pr.ReleasePeek()
			return err
		}},
		{name: "commit of nothing lent", loans: 0, write: func(dst io.WriterAt, off, n int64) error {
			return dst.(dma.ReserveWriterAt).CommitReserved(512)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ld := newLendDisk(newMemDisk(1024, 512), 4*512, true)
			s := &funcDMA{read: tt.read, write: tt.write}
			d, err := ata.NewDevice(ata.Config{Info: testInfo(1024), Backend: ld, DMA: s})
			if err != nil {
				t.Fatal(err)
			}
			op := ata.CmdReadDMAExt
			if tt.write != nil {
				op = ata.CmdWriteDMAExt
			}
			issue(d, ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: 100, Count: 8})
			if d.Status() != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorABRT {
				t.Errorf("status %v error %v, want DRDY|ERR ABRT (backend: %v)", d.Status(), d.Error(), d.BackendErr())
			}
			if ld.loans != tt.loans || ld.lent != 0 || ld.misuse != 0 || len(ld.writes) != 0 {
				t.Errorf("%d loans (want %d), one left lent: %v, %d misused, writes %v", ld.loans, tt.loans, ld.lent != 0, ld.misuse, ld.writes)
			}
		})
	}
}

// TestTrackerViews: the views the device hands its engine have the
// backend's optional interfaces for their direction, and only those.
func TestTrackerViews(t *testing.T) {
	for _, tt := range []struct {
		name                string
		be                  func(m *memDisk) ata.Backend
		async, lendR, lendW bool
	}{
		{"plain", func(m *memDisk) ata.Backend { return m }, false, false, false},
		{"async", func(m *memDisk) ata.Backend { return newAsyncDisk(m, true) }, true, false, false},
		{"lending", func(m *memDisk) ata.Backend { return newLendDisk(m, 512, true) }, false, true, true},
		{"async and lending", func(m *memDisk) ata.Backend {
			return asyncLendDisk{newAsyncDisk(m, true), newLendDisk(m, 512, true)}
		}, true, true, true},
		{"peek only", func(m *memDisk) ata.Backend {
			l := newLendDisk(m, 512, true)
			return struct {
				ata.PeekReaderAt
				io.WriterAt
			}{l, m}
		}, false, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got [4]bool
			s := &funcDMA{
				read: func(src io.ReaderAt, off, n int64) error {
					_, got[0] = src.(dma.AsyncReaderAt)
					_, got[1] = src.(dma.PeekReaderAt)
					return nil
				},
				write: func(dst io.WriterAt, off, n int64) error {
					_, got[2] = dst.(dma.AsyncWriterAt)
					_, got[3] = dst.(dma.ReserveWriterAt)
					return nil
				},
			}
			info := testInfo(1024)
			info.TRIM = false // "peek only" has no Trim
			d, err := ata.NewDevice(ata.Config{Info: info, Backend: tt.be(newMemDisk(1024, 512)), DMA: s})
			if err != nil {
				t.Fatal(err)
			}
			issue(d, ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 1, Count: 1})
			issue(d, ata.Command{Op: ata.CmdWriteDMAExt, Addressing: ata.AddrLBA48, LBA: 1, Count: 1})
			want := [4]bool{tt.async, tt.lendR, tt.async, tt.lendW}
			if got != want {
				t.Errorf("src async, peek; dst async, reserve: %v, want %v", got, want)
			}
		})
	}
}

// asyncLendDisk is a backend with both AsyncReaderAt/AsyncWriterAt and
// PeekReaderAt/ReserveWriterAt.
type asyncLendDisk struct {
	*asyncDisk
	l *lendDisk
}

func (a asyncLendDisk) PeekAt(off int64, n int) ([]byte, error)    { return a.l.PeekAt(off, n) }
func (a asyncLendDisk) ReleasePeek()                               { a.l.ReleasePeek() }
func (a asyncLendDisk) ReserveAt(off int64, n int) ([]byte, error) { return a.l.ReserveAt(off, n) }
func (a asyncLendDisk) CommitReserved(m int) error                 { return a.l.CommitReserved(m) }
