package dma

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/allocs"
)

// lendDev is a memDev that lends a buffer of its own (PeekReaderAt,
// ReserveWriterAt), piece bytes at a time (piece 0: all that is asked;
// wrong lends one byte more than asked, a length the contract rules out).
// A peek or commit fails where the memDev would; a reserve where refuseAt
// says. CommitReserved(m) writes the first m bytes.
// The buffer is overwritten when a loan ends, so an engine that used it
// after would move the wrong bytes. Misuse (a second loan, an end of
// none) is counted; so are the loans and the bytes committed.
type lendDev struct {
	*memDev
	piece     int
	wrong     bool
	refuseAt  int64 // a ReserveAt of a buffer holding this offset fails; -1: none
	buf       []byte
	off       int64
	lent      int // 0 none, 1 peek, 2 reserve
	loans     int
	committed int
	misuse    int
}

func newLendDev(d *memDev, piece int) *lendDev {
	return &lendDev{memDev: d, piece: piece, refuseAt: -1, buf: make([]byte, len(d.b)+1)}
}

func (l *lendDev) size(n int) int {
	if l.piece > 0 {
		n = min(n, l.piece)
	}
	if l.wrong {
		n++
	}
	return n
}

func (l *lendDev) PeekAt(off int64, n int) ([]byte, error) {
	if l.lent != 0 {
		l.misuse++
		return nil, errors.New("lendDev: second loan")
	}
	p := l.buf[:l.size(n)]
	if m, err := l.memDev.ReadAt(p, off); m < len(p) {
		return nil, fmt.Errorf("lendDev: %d of %d bytes: %w", m, len(p), err)
	}
	l.lent, l.off = 1, off
	l.loans++
	return p, nil
}

func (l *lendDev) ReleasePeek() {
	if l.lent != 1 {
		l.misuse++
	}
	l.lent = 0
	clear(l.buf)
}

func (l *lendDev) ReserveAt(off int64, n int) ([]byte, error) {
	if l.lent != 0 {
		l.misuse++
		return nil, errors.New("lendDev: second loan")
	}
	if l.refuseAt >= 0 && off <= l.refuseAt && l.refuseAt < off+int64(l.size(n)) {
		return nil, errInjected // a write-behind cache reporting an earlier failure
	}
	l.lent, l.off = 2, off
	l.loans++
	clear(l.buf)
	return l.buf[:l.size(n)], nil
}

func (l *lendDev) CommitReserved(m int) error {
	if l.lent != 2 {
		l.misuse++
	}
	l.lent = 0
	if m == 0 {
		return nil
	}
	k, err := l.memDev.WriteAt(l.buf[:m], l.off)
	l.committed += k
	return err
}

// TestLending: a streaming engine moves a transfer through a lending
// device's buffers, inline or not, each byte copied once between them and
// host memory, the tap (copying or not) seeing every byte in order;
// store-and-forward uses ReadAt and WriteAt.
func TestLending(t *testing.T) {
	const n = 24 * SectorSize
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"streaming", Config{FIFOBlocks: 8, ChunkSectors: 4}},
		{"streaming inline", Config{FIFOBlocks: 8, ChunkSectors: 4, InlineMax: n}},
		{"store-and-forward", Config{Mode: StoreAndForward}},
	} {
		for _, copyTap := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/copytap=%v", c.name, copyTap), func(t *testing.T) {
				var seen []byte
				cfg := c.cfg
				cfg.Tap = TapFunc(func(p []byte) { seen = append(seen, p...) })
				if copyTap {
					cfg.Tap = &recordingCopyTap{seen: &seen}
				}
				e := mustEngine(t, cfg)
				defer e.Close()
				host := [][]byte{make([]byte, 1000), make([]byte, 3000), make([]byte, n-4000)}
				e.SetRegions(host...)
				data := pattern(n+SectorSize, 8)
				ld := newLendDev(newDev(data), 5*SectorSize)
				if err := e.DeviceToHost(ld, SectorSize, n); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(concat(host), data[SectorSize:]) || !bytes.Equal(seen, data[SectorSize:]) {
					t.Fatal("read: host or tap differ from the device")
				}
				r := e.Last()
				seen = seen[:0]
				dev := newLendDev(newDev(make([]byte, n+SectorSize)), 5*SectorSize)
				if err := e.HostToDevice(dev, SectorSize, n); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dev.b[SectorSize:], data[SectorSize:]) || !bytes.Equal(seen, data[SectorSize:]) {
					t.Fatal("write: device or tap differ from host memory")
				}
				w := e.Last()
				loans := 10 // 24 sectors in loans of 5, each way
				if c.cfg.Mode == StoreAndForward {
					loans = 0
				}
				if ld.loans+dev.loans != loans || ld.misuse+dev.misuse != 0 || ld.lent+dev.lent != 0 {
					t.Errorf("%d loans, want %d; %d misused, %d left lent", ld.loans+dev.loans, loans, ld.misuse+dev.misuse, ld.lent+dev.lent)
				}
				for _, tr := range []Transfer{r, w} {
					if tr.Bytes != n || tr.CopiesPerByte() != 1 || tr.Interrupts != 2 && loans > 0 || tr.Inline != (loans > 0 || c.cfg.InlineMax > 0) {
						t.Errorf("%v: %+v", tr.Direction, tr)
					}
				}
			})
		}
	}
}

// TestLendingErrors: a failed loan ends the transfer with the device's
// error, wrapped, after the loans before it have moved; a buffer lent with
// a length the contract rules out, or one the tap refuses, is given back
// (a write's committed empty) and the transfer fails with the engine's own
// error.
func TestLendingErrors(t *testing.T) {
	const n = 32 * SectorSize
	e := mustEngine(t, Config{FIFOBlocks: 8, ChunkSectors: 4, InlineMax: n})
	defer e.Close()
	host := make([]byte, n)
	e.SetRegions(host)
	data := pattern(n, 5)

	// A peek that fails at sector 13, in the third loan of 6: the two
	// loans before it reach the host.
	ld := newLendDev(newDev(data), 6*SectorSize)
	ld.failAt, ld.err = 13*SectorSize+100, errInjected
	if err := e.DeviceToHost(ld, 0, n); !errors.Is(err, errInjected) {
		t.Fatalf("read error %v, want the device's", err)
	}
	if tr := e.Last(); tr.Bytes != 12*SectorSize || !bytes.Equal(host[:tr.Bytes], data[:tr.Bytes]) {
		t.Fatalf("after a failed peek: %d bytes moved", tr.Bytes)
	}

	// A commit that fails at sector 20: the loans before it are written.
	wd := newLendDev(newDev(make([]byte, n)), 6*SectorSize)
	wd.failAt, wd.err = 20*SectorSize, errInjected
	copy(host, data)
	if err := e.HostToDevice(wd, 0, n); !errors.Is(err, errInjected) {
		t.Fatalf("write error %v", err)
	}
	if got := e.Last().Bytes; got != 18*SectorSize || wd.committed != 20*SectorSize || !bytes.Equal(wd.b[:20*SectorSize], data[:20*SectorSize]) {
		t.Fatalf("failed write: %d bytes moved, %d committed", got, wd.committed)
	}

	// A reserve that fails (a write-behind cache reporting an earlier
	// write) at the loan of sector 12.
	rd := newLendDev(newDev(make([]byte, n)), 6*SectorSize)
	rd.refuseAt = 12 * SectorSize
	if err := e.HostToDevice(rd, 0, n); !errors.Is(err, errInjected) || e.Last().Bytes != 12*SectorSize || rd.lent != 0 {
		t.Fatalf("failed reserve: %v, %d bytes moved", err, e.Last().Bytes)
	}

	// Loans of a wrong length.
	for _, write := range []bool{false, true} {
		wr := newLendDev(newDev(make([]byte, n)), 6*SectorSize)
		wr.wrong = true
		var err error
		if write {
			err = e.HostToDevice(wr, 0, n)
		} else {
			err = e.DeviceToHost(wr, 0, n)
		}
		if !errors.Is(err, errLoan) || wr.lent != 0 || wr.misuse != 0 || wr.committed != 0 {
			t.Fatalf("write=%v, wrong length: %v, left lent %v, %d misused, %d committed", write, err, wr.lent != 0, wr.misuse, wr.committed)
		}
	}
}

// TestLendingTapError: a tap that refuses a loan's data ends the transfer
// with its error; a write's buffer is committed empty.
func TestLendingTapError(t *testing.T) {
	const n = 16 * SectorSize
	for _, write := range []bool{false, true} {
		tap := &failTap{after: 5 * SectorSize}
		e := mustEngine(t, Config{Tap: tap, FIFOBlocks: 8, ChunkSectors: 4})
		e.SetRegions(make([]byte, n))
		ld := newLendDev(newDev(make([]byte, n)), 4*SectorSize)
		var err error
		if write {
			err = e.HostToDevice(ld, 0, n)
		} else {
			err = e.DeviceToHost(ld, 0, n)
		}
		if !errors.Is(err, errInjected) || e.Last().Bytes != 4*SectorSize || ld.lent != 0 || ld.misuse != 0 {
			t.Fatalf("write=%v: %v, %d bytes moved, left lent %v, %d misused", write, err, e.Last().Bytes, ld.lent != 0, ld.misuse)
		}
		if write && ld.committed != 4*SectorSize {
			t.Fatalf("%d bytes committed, want the first loan's", ld.committed)
		}
		e.Close()
	}
}

// TestLendingModelledTime: with a Timing profile, a transfer through lent
// buffers is modelled as the same transfer through the FIFO, inline.
func TestLendingModelledTime(t *testing.T) {
	const n = 64 << 10
	timing := PaperAfter()
	for _, read := range []bool{true, false} {
		var got [2]Transfer
		for i, lend := range []bool{false, true} {
			e := mustEngine(t, Config{Clock: &VirtualClock{}, Timing: &timing, FIFOBlocks: 8, ChunkSectors: 2, InlineMax: n})
			e.SetRegions(pattern(n, 3))
			var dev interface {
				io.ReaderAt
				io.WriterAt
			} = newDev(pattern(n, 5))
			if lend {
				dev = newLendDev(newDev(pattern(n, 5)), 8*SectorSize)
			}
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
			got[i].Copies = 0 // the copy calls depend on the pieces
			e.Close()
		}
		if diff := cmp.Diff(got[0], got[1]); diff != "" {
			t.Errorf("read=%v: transfer through lent buffers differs (-FIFO +lent):\n%s", read, diff)
		}
	}
}

// TestLendingNoAllocs: a transfer through lent buffers allocates nothing.
func TestLendingNoAllocs(t *testing.T) {
	const n = 64 << 10
	e := mustEngine(t, Config{Tap: &recordingCopyTap{seen: new([]byte)}})
	defer e.Close()
	e.SetRegions(make([]byte, n))
	ld := newLendDev(newDev(make([]byte, n)), 16<<10)
	run := func() {
		*e.tap.(*recordingCopyTap).seen = (*e.tap.(*recordingCopyTap).seen)[:0]
		if err := e.DeviceToHost(ld, 0, n); err != nil {
			t.Fatal(err)
		}
		if err := e.HostToDevice(ld, 0, n); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := allocs.PerRun(1000, run); a > allocs.Slack {
		t.Errorf("%v allocations per transfer pair", a)
	}
}
