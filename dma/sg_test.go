package dma

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"unsafe"

	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// genRegions draws regions of random sizes (empty ones included) filled
// with distinct bytes, and returns them with their concatenation.
func genRegions(t *rapid.T) ([][]byte, []byte) {
	sizes := rapid.SliceOfN(rapid.IntRange(0, 1300), 1, 8).Draw(t, "sizes")
	var regions [][]byte
	var flat []byte
	c := byte(1)
	for _, n := range sizes {
		r := make([]byte, n)
		for i := range r {
			r[i] = c
			c = c*7 + 3
		}
		regions = append(regions, r)
		flat = append(flat, r...)
	}
	return regions, flat
}

func concat(pieces [][]byte) []byte {
	var b []byte
	for _, p := range pieces {
		b = append(b, p...)
	}
	return b
}

// within reports whether piece aliases some region.
func within(piece []byte, regions [][]byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(piece)))
	for _, r := range regions {
		if len(r) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if p >= lo && p+uintptr(len(piece)) <= lo+uintptr(len(r)) {
			return true
		}
	}
	return false
}

func TestSGListModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		regions, flat := genRegions(t)
		l := NewSGList(regions...)
		if l.Len() != int64(len(flat)) || l.NumRegions() != len(regions) {
			t.Fatalf("Len %d NumRegions %d, want %d and %d", l.Len(), l.NumRegions(), len(flat), len(regions))
		}
		total := int64(len(flat))
		pos := rapid.Int64Range(0, total).Draw(t, "pos")
		n := rapid.Int64Range(0, total-pos).Draw(t, "n")

		// Locate: the region's byte is the flat byte.
		if pos < total {
			r, off, err := l.Locate(pos)
			if err != nil {
				t.Fatal(err)
			}
			if off >= len(regions[r]) || regions[r][off] != flat[pos] {
				t.Fatalf("Locate(%d) = region %d offset %d", pos, r, off)
			}
		} else if _, _, err := l.Locate(pos); !errors.Is(err, ErrRange) {
			t.Fatalf("Locate(Len) = %v, want ErrRange", err)
		}

		segs, err := l.Segments(nil, pos, n)
		if err != nil {
			t.Fatal(err)
		}
		if got := concat(segs); !bytes.Equal(got, flat[pos:pos+n]) {
			t.Fatalf("Segments(%d, %d) = %v, want %v", pos, n, got, flat[pos:pos+n])
		}
		for _, s := range segs {
			if len(s) == 0 || !within(s, regions) {
				t.Fatalf("Segments returned a piece that is empty or not in a region")
			}
		}

		split, err := l.SplitSectors(nil, pos, n)
		if err != nil {
			t.Fatal(err)
		}
		if got := concat(split); !bytes.Equal(got, flat[pos:pos+n]) {
			t.Fatalf("SplitSectors(%d, %d) bytes differ", pos, n)
		}
		// No piece crosses a sector boundary, and pieces are maximal: a
		// new piece starts only at a sector or region boundary.
		p := pos
		for i, s := range split {
			if len(s) == 0 || !within(s, regions) {
				t.Fatalf("SplitSectors piece %d empty or not in a region", i)
			}
			if p/SectorSize != (p+int64(len(s))-1)/SectorSize {
				t.Fatalf("piece %d (%d bytes at %d) crosses a sector boundary", i, len(s), p)
			}
			if i > 0 && p%SectorSize != 0 {
				r, off, _ := l.Locate(p)
				_ = r
				if off != 0 {
					t.Fatalf("piece %d starts at %d, inside a sector and a region", i, p)
				}
			}
			p += int64(len(s))
		}

		if total >= SectorSize {
			i := rapid.Int64Range(0, total/SectorSize-1).Draw(t, "sector")
			sec, err := l.Sector(nil, i)
			if err != nil || !bytes.Equal(concat(sec), flat[i*SectorSize:(i+1)*SectorSize]) {
				t.Fatalf("Sector(%d): %v", i, err)
			}
		}

		// ReadAt and WriteAt against the flat model.
		buf := make([]byte, n+rapid.Int64Range(0, 3).Draw(t, "extra"))
		m, err := l.ReadAt(buf, pos)
		wantN := min(int64(len(buf)), total-pos)
		if int64(m) != wantN || !bytes.Equal(buf[:m], flat[pos:pos+wantN]) {
			t.Fatalf("ReadAt(%d bytes, %d) = %d, %v", len(buf), pos, m, err)
		}
		if (int64(len(buf)) > wantN) != (err == io.EOF) {
			t.Fatalf("ReadAt(%d bytes, %d) error %v", len(buf), pos, err)
		}
		data := rapid.SliceOfN(rapid.Byte(), int(n), int(n)).Draw(t, "data")
		if m, err := l.WriteAt(data, pos); err != nil || m != len(data) {
			t.Fatalf("WriteAt: %d, %v", m, err)
		}
		copy(flat[pos:], data)
		if got := concat(regions); !bytes.Equal(got, flat) {
			t.Fatalf("after WriteAt the regions differ from the model")
		}
		if _, err := l.WriteAt(make([]byte, total-pos+1), pos); !errors.Is(err, ErrRange) {
			t.Fatalf("WriteAt past the end: %v", err)
		}
	})
}

func TestSGListErrors(t *testing.T) {
	l := NewSGList(make([]byte, 1000), nil, make([]byte, 24))
	for _, tc := range []struct{ pos, n int64 }{{-1, 1}, {0, 1025}, {1024, 1}, {10, -1}} {
		if _, err := l.Segments(nil, tc.pos, tc.n); !errors.Is(err, ErrRange) {
			t.Errorf("Segments(%d, %d) = %v", tc.pos, tc.n, err)
		}
		if _, err := l.SplitSectors(nil, tc.pos, tc.n); !errors.Is(err, ErrRange) {
			t.Errorf("SplitSectors(%d, %d) = %v", tc.pos, tc.n, err)
		}
	}
	if _, err := l.Sector(nil, 2); !errors.Is(err, ErrRange) {
		t.Errorf("Sector past the end: %v", err)
	}
	// Sector 1 straddles the first and the third region.
	sec, err := l.Sector(nil, 1)
	if err != nil || len(sec) != 2 || len(sec[0]) != 488 || len(sec[1]) != 24 {
		t.Fatalf("Sector(1) = %d pieces, %v", len(sec), err)
	}
	if _, err := l.ReadAt(make([]byte, 1), -1); !errors.Is(err, ErrRange) {
		t.Errorf("ReadAt(-1): %v", err)
	}
	if n, err := l.ReadAt(nil, 1024); n != 0 || err != nil {
		t.Errorf("ReadAt(nil, Len) = %d, %v", n, err)
	}
	var empty SGList
	if empty.Len() != 0 {
		t.Fatal("empty list has a length")
	}
	if _, err := empty.ReadAt(make([]byte, 1), 0); err != io.EOF {
		t.Fatalf("ReadAt on an empty list: %v", err)
	}
}

func TestSGListResetNoAlloc(t *testing.T) {
	regions := [][]byte{make([]byte, 512), make([]byte, 100), make([]byte, 412)}
	var l SGList
	l.Reset(regions...)
	dst := make([][]byte, 0, 8)
	nallocs := allocs.PerRun(1000, func() {
		l.Reset(regions...)
		dst, _ = l.SplitSectors(dst[:0], 0, 1024)
	})
	if nallocs > allocs.Slack {
		t.Fatalf("%v allocations, want 0", nallocs)
	}
}
