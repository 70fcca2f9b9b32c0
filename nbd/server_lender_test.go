package nbd

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"
)

// serverSliceLender is a Backend over a byte slice, not a MemDisk, that
// lends its memory: ranges of zeroes from holeFrom on are holes of any
// length (longer than the server's zero page), the rest one piece.
type serverSliceLender struct {
	data     []byte
	holeFrom int64
	loans    atomic.Int64
}

func (d *serverSliceLender) Size() int64 { return int64(len(d.data)) }
func (d *serverSliceLender) ReadAt(p []byte, off int64) (int, error) {
	return copy(p, d.data[off:]), nil
}
func (d *serverSliceLender) WriteAt(p []byte, off int64) (int, error) {
	return copy(d.data[off:], p), nil
}
func (d *serverSliceLender) Lend(off, n int64, pieces []LentPiece) []LentPiece {
	d.loans.Add(1)
	if end := off + n; end > d.holeFrom {
		if off < d.holeFrom {
			pieces = append(pieces, LentPiece{Data: d.data[off:d.holeFrom], Len: int(d.holeFrom - off)})
			off = d.holeFrom
		}
		return append(pieces, LentPiece{Len: int(end - off)})
	}
	return append(pieces, LentPiece{Data: d.data[off : off+n], Len: int(n)})
}
func (d *serverSliceLender) GiveBack(off, n int64) { d.loans.Add(-1) }

// Any Backend can be a Lender: the server sends its pieces, holes of any
// length included, and gives every loan back.
func TestServerLenderNotMemDisk(t *testing.T) {
	const size, holeFrom = 1 << 20, 300 << 10
	d := &serverSliceLender{data: make([]byte, size), holeFrom: holeFrom}
	for i := range d.data[:holeFrom] {
		d.data[i] = byte(i*7 + 1)
	}
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	for _, structured := range []bool{false, true} {
		c := serverTestDial(t, path)
		c.negotiate("", structured, false)
		for _, r := range []struct{ off, n int }{{0, 4096}, {100, 200 << 10}, {250 << 10, 400 << 10}, {400 << 10, 500 << 10}} {
			c.request(CmdRead, 0, 1, uint64(r.off), uint32(r.n), nil)
			var got []byte
			if structured {
				var err error
				got, _, err = serverTestAssemble(t, c.chunks(), uint64(r.off), r.n)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				rep, data := c.simple(r.n)
				if rep.Error != 0 {
					t.Fatalf("read: %v", rep.Error)
				}
				got = data
			}
			if !bytes.Equal(got, d.data[r.off:r.off+r.n]) {
				t.Fatalf("structured %v: read [%d,+%d) differs from the backend", structured, r.off, r.n)
			}
		}
	}
	// A loan is given back once its reply is written, which may be just
	// after the client has it.
	for deadline := time.Now().Add(5 * time.Second); d.loans.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d loans not given back", d.loans.Load())
		}
	}
}
