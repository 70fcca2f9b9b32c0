package ata_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/nhdkit/nhd/ata"
	"pgregory.net/rapid"
)

// scriptDMA is a DMA engine that splits a transfer into chunks, starts
// them all through the device's async view of the backend, and waits for
// them in the order its script gives (with, if leak is set, one left in
// flight). It checks that the view it is handed has the async methods.
type scriptDMA struct {
	t     *rapid.T
	chunk int64
	leak  bool
	host  []byte
}

func (s *scriptDMA) DeviceToHost(src io.ReaderAt, off, n int64) error {
	ar, ok := src.(ata.AsyncReaderAt)
	if !ok {
		s.t.Fatal("the device hid its backend's AsyncReaderAt")
	}
	return s.run(n, func(p []byte, i int64) (uint64, error) { return ar.StartReadAt(context.Background(), p, off+i) }, ar.Wait)
}

func (s *scriptDMA) HostToDevice(dst io.WriterAt, off, n int64) error {
	aw, ok := dst.(ata.AsyncWriterAt)
	if !ok {
		s.t.Fatal("the device hid its backend's AsyncWriterAt")
	}
	return s.run(n, func(p []byte, i int64) (uint64, error) { return aw.StartWriteAt(context.Background(), p, off+i) }, aw.Wait)
}

func (s *scriptDMA) run(n int64, start func(p []byte, i int64) (uint64, error), wait func(context.Context, uint64) error) error {
	var hs []uint64
	var errs []error
	for i := int64(0); i < n; i += s.chunk {
		h, err := start(s.host[i:min(i+s.chunk, n)], i)
		if err != nil {
			errs = append(errs, err)
			break
		}
		hs = append(hs, h)
	}
	order := rapid.Permutation(seq(len(hs))).Draw(s.t, "order")
	if s.leak && len(order) > 0 {
		order = order[1:]
	}
	for _, i := range order {
		if err := wait(context.Background(), hs[i]); err != nil {
			errs = append(errs, err)
		}
		// A second wait of the same handle is refused without reaching
		// the backend.
		if err := wait(context.Background(), hs[i]); err == nil {
			s.t.Fatal("a handle was waited for twice")
		}
	}
	return errors.Join(errs...)
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestAsyncViewProperty: whatever the chunking and the order of the waits,
// a command over an async backend ends as the lowest failing sector says
// (UNC, or DF|ERR ABRT, at that LBA; success with none), the backend sees
// every request it started waited for exactly once, and an engine that
// leaves one in flight ends the command in ABRT with the request drained.
func TestAsyncViewProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const sectors = 256
		mem := newMemDisk(sectors, 512)
		ad := newAsyncDisk(mem, rapid.Bool().Draw(rt, "exact"))
		eng := &scriptDMA{t: rt, host: make([]byte, 64*512)}
		d, err := ata.NewDevice(ata.Config{Info: testInfo(sectors), Backend: ad, DMA: eng})
		if err != nil {
			rt.Fatal(err)
		}
		for range rapid.IntRange(1, 5).Draw(rt, "commands") {
			write := rapid.Bool().Draw(rt, "write")
			lba := rapid.Int64Range(0, sectors-1).Draw(rt, "lba")
			count := rapid.Int64Range(1, min(64, sectors-lba)).Draw(rt, "count")
			eng.chunk = rapid.Int64Range(1, 16).Draw(rt, "chunkSectors") * 512
			eng.leak = rapid.IntRange(0, 9).Draw(rt, "leak") == 0
			clear(mem.badRead)
			clear(mem.badWrite)
			bad := rapid.SliceOfNDistinct(rapid.Int64Range(lba, lba+count-1), 0, 3, rapid.ID[int64]).Draw(rt, "bad")
			for _, s := range bad {
				mem.badRead[s], mem.badWrite[s] = true, true
			}
			started := ad.started
			op := ata.CmdReadDMAExt
			if write {
				op = ata.CmdWriteDMAExt
			}
			issue(d, ata.Command{Op: op, Addressing: ata.AddrLBA48, LBA: uint64(lba), Count: uint32(count)})

			if ad.inflight != 0 || ad.misuse != 0 {
				rt.Fatalf("%d requests left in flight, %d waits of handles not in flight", ad.inflight, ad.misuse)
			}
			if want := int((count*512 + eng.chunk - 1) / eng.chunk); ad.started-started != want {
				rt.Fatalf("%d requests started, want %d", ad.started-started, want)
			}
			tf := d.TaskFile()
			got := uint64(tf.LBALow) | uint64(tf.LBAMid)<<8 | uint64(tf.LBAHigh)<<16 | uint64(tf.HOBLBALow)<<24
			switch {
			case eng.leak && len(bad) == 0:
				if d.Status() != ata.StatusDRDY|ata.StatusERR || d.Error() != ata.ErrorABRT {
					rt.Fatalf("a request left in flight: status %v error %v, want ABRT", d.Status(), d.Error())
				}
			case eng.leak:
				// The leaked request may be the failing one: then its
				// failure is found only when the device drains it, and
				// the command fails in ABRT for the engine's fault.
				if d.Status()&ata.StatusERR == 0 {
					rt.Fatalf("status %v, want an error", d.Status())
				}
			case len(bad) == 0:
				if !d.Status().OK() {
					rt.Fatalf("status %v error %v (%v), want success", d.Status(), d.Error(), d.BackendErr())
				}
			default:
				first := bad[0]
				for _, s := range bad {
					first = min(first, s)
				}
				want := first
				if !ad.exact {
					want = lba + (first-lba)*512/eng.chunk*eng.chunk/512 // the failing request's start
				}
				wantStatus, wantErr := ata.StatusDRDY|ata.StatusERR, ata.ErrorUNC
				if write {
					wantStatus, wantErr = ata.StatusDRDY|ata.StatusDF|ata.StatusERR, ata.ErrorABRT
				}
				if d.Status() != wantStatus || d.Error() != wantErr || got != uint64(want) {
					rt.Fatalf("status %v error %v LBA %d, want %v %v %d", d.Status(), d.Error(), got, wantStatus, wantErr, want)
				}
			}
		}
	})
}
