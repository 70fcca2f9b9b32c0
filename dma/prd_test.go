package dma

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Golden entries: SFF-8038i's layout, as Linux's ata_bmdma_fill_sg writes it
// (addr, then flags_len = len & 0xffff with ATA_PRD_EOT = 1<<31 on the last).
var goldenPRDs = []struct {
	name string
	p    PRD
	b    []byte
}{
	{"4 KiB", PRD{Addr: 0x00123400, Len: 0x1000}, []byte{0x00, 0x34, 0x12, 0x00, 0x00, 0x10, 0x00, 0x00}},
	{"4 KiB EOT", PRD{Addr: 0x00123400, Len: 0x1000, EOT: true}, []byte{0x00, 0x34, 0x12, 0x00, 0x00, 0x10, 0x00, 0x80}},
	{"64 KiB is count 0", PRD{Addr: 0xfeed0000, Len: 0x10000, EOT: true}, []byte{0x00, 0x00, 0xed, 0xfe, 0x00, 0x00, 0x00, 0x80}},
	{"one sector at top of 4 GiB", PRD{Addr: 0xfffffe00, Len: 512}, []byte{0x00, 0xfe, 0xff, 0xff, 0x00, 0x02, 0x00, 0x00}},
	{"two bytes", PRD{Addr: 2, Len: 2}, []byte{0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00}},
}

func TestPRDGolden(t *testing.T) {
	for _, g := range goldenPRDs {
		var b [PRDSize]byte
		if err := g.p.Put(b[:]); err != nil {
			t.Fatalf("%s: Put: %v", g.name, err)
		}
		if !bytes.Equal(b[:], g.b) {
			t.Errorf("%s: Put = % x, want % x", g.name, b, g.b)
		}
		p, err := DecodePRD(g.b)
		if err != nil || p != g.p {
			t.Errorf("%s: DecodePRD = %+v, %v; want %+v", g.name, p, err, g.p)
		}
		if lax := DecodePRDLax(g.b); lax != g.p {
			t.Errorf("%s: DecodePRDLax = %+v, want %+v", g.name, lax, g.p)
		}
	}
}

func TestPRDErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want error
		lax  PRD // what the hardware reads
	}{
		{"short", []byte{1, 2, 3}, io.ErrUnexpectedEOF, PRD{}},
		{"odd count is masked by hardware", []byte{0, 0, 1, 0, 0x01, 0x02, 0, 0}, ErrOdd, PRD{Addr: 0x10000, Len: 0x200}},
		{"count 1 reads as 64 KiB", []byte{0, 0, 1, 0, 0x01, 0, 0, 0}, ErrOdd, PRD{Addr: 0x10000, Len: 0x10000}},
		{"odd address", []byte{1, 0, 1, 0, 0, 2, 0, 0}, ErrOdd, PRD{Addr: 0x10000, Len: 0x200}},
		{"reserved bit 16", []byte{0, 0, 1, 0, 0, 2, 1, 0}, ErrReserved, PRD{Addr: 0x10000, Len: 0x200}},
		{"reserved bit 30", []byte{0, 0, 1, 0, 0, 2, 0, 0x40}, ErrReserved, PRD{Addr: 0x10000, Len: 0x200}},
		{"crosses 64 KiB", []byte{0x00, 0xff, 0x00, 0x00, 0x00, 0x02, 0, 0}, ErrBoundary, PRD{Addr: 0xff00, Len: 0x200}},
		{"64 KiB unaligned", []byte{0x00, 0x02, 0x00, 0x00, 0, 0, 0, 0x80}, ErrBoundary, PRD{Addr: 0x200, Len: 0x10000, EOT: true}},
	} {
		_, err := DecodePRD(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodePRD error %v, want %v", tc.name, err, tc.want)
		}
		if len(tc.b) >= PRDSize {
			if lax := DecodePRDLax(tc.b); lax != tc.lax {
				t.Errorf("%s: DecodePRDLax = %+v, want %+v", tc.name, lax, tc.lax)
			}
		}
	}
	for _, tc := range []struct {
		p    PRD
		want error
	}{
		{PRD{Addr: 0, Len: 0}, ErrRegionSize},
		{PRD{Addr: 0, Len: 0x10002}, ErrRegionSize},
		{PRD{Addr: 0, Len: 3}, ErrOdd},
		{PRD{Addr: 0x1fffe, Len: 4}, ErrBoundary},
		{PRD{Addr: 0xffffff00, Len: 0x200}, ErrBoundary}, // past 4 GiB
	} {
		var b [PRDSize]byte
		if err := tc.p.Put(b[:]); !errors.Is(err, tc.want) {
			t.Errorf("Put(%+v) = %v, want %v", tc.p, err, tc.want)
		}
	}
}

func TestBuildAndParseTable(t *testing.T) {
	// A 64 KiB read into three segments, one of which straddles a 64 KiB
	// boundary and one of which is a whole aligned 64 KiB... shortened.
	table, err := BuildTable(nil,
		Segment{Addr: 0x1f000, Len: 0x3000},  // splits at 0x20000
		Segment{Addr: 0x30000, Len: 0x10000}, // exactly one 64 KiB region
		Segment{Addr: 0x8000, Len: 0x200},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []PRD{
		{Addr: 0x1f000, Len: 0x1000},
		{Addr: 0x20000, Len: 0x2000},
		{Addr: 0x30000, Len: 0x10000},
		{Addr: 0x8000, Len: 0x200, EOT: true},
	}
	if diff := cmp.Diff(want, table); diff != "" {
		t.Fatalf("BuildTable (-want +got):\n%s", diff)
	}
	b, err := AppendTable(nil, table)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := []byte{
		0x00, 0xf0, 0x01, 0x00, 0x00, 0x10, 0x00, 0x00,
		0x00, 0x00, 0x02, 0x00, 0x00, 0x20, 0x00, 0x00,
		0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x80, 0x00, 0x00, 0x00, 0x02, 0x00, 0x80,
	}
	if !bytes.Equal(b, wantBytes) {
		t.Fatalf("AppendTable = % x\nwant         % x", b, wantBytes)
	}
	// Bytes after the EOT entry are not read.
	got, err := ParseTable(nil, append(b, 0xde, 0xad, 0xbe, 0xef))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(table, got); diff != "" {
		t.Fatalf("ParseTable (-want +got):\n%s", diff)
	}
	n := TableLen(table)
	if n != 0x3000+0x10000+0x200 {
		t.Fatalf("TableLen = %#x", n)
	}
	if err := ValidateTable(table, n); err != nil {
		t.Fatal(err)
	}
	if err := ValidateTable(table, n-SectorSize); !errors.Is(err, ErrTableLength) {
		t.Fatalf("ValidateTable short: %v", err)
	}

	bad := append([]PRD(nil), table...)
	bad[1].EOT = true
	if err := ValidateTable(bad, n); !errors.Is(err, ErrEarlyEOT) {
		t.Fatalf("early EOT: %v", err)
	}
	bad = append([]PRD(nil), table...)
	bad[3].EOT = false
	if err := ValidateTable(bad, n); !errors.Is(err, ErrNoEOT) {
		t.Fatalf("no EOT: %v", err)
	}
	if _, err := ParseTable(nil, b[:24]); !errors.Is(err, ErrNoEOT) {
		t.Fatalf("ParseTable without EOT: %v", err)
	}
	if _, err := AppendTable(nil, nil); !errors.Is(err, ErrNoEOT) {
		t.Fatalf("empty table: %v", err)
	}
	// A table that never ends within the 4096 bytes a bus master reads.
	long := bytes.Repeat([]byte{0, 0, 0, 0, 0, 2, 0, 0}, MaxTableEntries+1)
	if _, err := ParseTable(nil, long); !errors.Is(err, ErrNoEOT) {
		t.Fatalf("endless table: %v", err)
	}
	if _, err := BuildTable(nil, Segment{Addr: 0, Len: 0x200*MaxTableEntries + 0x10000*2}); err != nil {
		t.Fatalf("a big aligned segment should fit: %v", err)
	}
	many := make([]Segment, MaxTableEntries+1)
	for i := range many {
		many[i] = Segment{Addr: uint32(i) * 0x400, Len: 0x200}
	}
	if _, err := BuildTable(nil, many...); !errors.Is(err, ErrTableSize) {
		t.Fatalf("too many entries: %v", err)
	}
	for _, s := range []Segment{{0, 0}, {1, 2}, {0, 3}, {0xffffff00, 0x200}} {
		if _, err := BuildTable(nil, s); !errors.Is(err, ErrRegionSize) {
			t.Errorf("BuildTable(%+v) = %v, want ErrRegionSize", s, err)
		}
	}
}

func genPRD(t *rapid.T) PRD {
	l := uint32(rapid.IntRange(1, MaxRegionSize/2).Draw(t, "halfLen")) * 2
	// An even address whose region stays inside one 64 KiB window.
	window := uint32(rapid.IntRange(0, 0xffff).Draw(t, "window")) << 16
	off := uint32(rapid.IntRange(0, int(MaxRegionSize-l)/2).Draw(t, "halfOff")) * 2
	return PRD{Addr: window + off, Len: l, EOT: rapid.Bool().Draw(t, "eot")}
}

func TestPRDRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPRD(t)
		b, err := AppendPRD(nil, p)
		if err != nil {
			t.Fatalf("AppendPRD(%+v): %v", p, err)
		}
		got, err := DecodePRD(b)
		if err != nil || got != p {
			t.Fatalf("DecodePRD(% x) = %+v, %v; want %+v", b, got, err, p)
		}
		if lax := DecodePRDLax(b); lax != p {
			t.Fatalf("DecodePRDLax = %+v, want %+v", lax, p)
		}
	})
}

// TestPRDCanonical: any 8 bytes the strict decoder accepts encode back to
// themselves, and the hardware reads them the same way.
func TestPRDCanonical(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), PRDSize, PRDSize).Draw(t, "b")
		checkPRDBytes(t, b)
	})
}

func TestBuildTableProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		segs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Segment {
			return Segment{
				Addr: uint32(rapid.IntRange(0, 1<<20).Draw(t, "addr")) * 2,
				Len:  uint32(rapid.IntRange(1, 1<<17).Draw(t, "len")) * 2,
			}
		}), 1, 8).Draw(t, "segs")
		table, err := BuildTable(nil, segs...)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, s := range segs {
			total += int64(s.Len)
		}
		if err := ValidateTable(table, total); err != nil {
			t.Fatal(err)
		}
		// The entries cover the segments in order, byte for byte.
		i := 0
		for _, s := range segs {
			addr := uint64(s.Addr)
			for addr < uint64(s.Addr)+uint64(s.Len) {
				if uint64(table[i].Addr) != addr {
					t.Fatalf("entry %d at %#x, want %#x", i, table[i].Addr, addr)
				}
				addr += uint64(table[i].Len)
				i++
			}
		}
		b, err := AppendTable(nil, table)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseTable(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(table, back); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

type fataler interface {
	Fatalf(format string, args ...any)
}

func checkPRDBytes(t fataler, b []byte) {
	p, err := DecodePRD(b)
	if err != nil {
		return
	}
	var e [PRDSize]byte
	if err := p.Put(e[:]); err != nil {
		t.Fatalf("DecodePRD(% x) = %+v, which Put rejects: %v", b, p, err)
	}
	if !bytes.Equal(e[:], b[:PRDSize]) {
		t.Fatalf("DecodePRD(% x) = %+v, encodes as % x", b, p, e)
	}
	if lax := DecodePRDLax(b); lax != p {
		t.Fatalf("DecodePRDLax(% x) = %+v, strict %+v", b, lax, p)
	}
}

func FuzzDecodePRD(f *testing.F) {
	for _, g := range goldenPRDs {
		f.Add(g.b)
	}
	f.Add([]byte{0, 0, 1, 0, 0x01, 0x02, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkPRDBytes(t, b)
		if len(b) >= PRDSize {
			lax := DecodePRDLax(b)
			if lax.Len == 0 || lax.Len > MaxRegionSize || lax.Len&1 != 0 || lax.Addr&1 != 0 {
				t.Fatalf("DecodePRDLax(% x) = %+v: not what a bus master can read", b, lax)
			}
		}
		table, err := ParseTable(nil, b)
		if err != nil {
			return
		}
		enc, err := AppendTable(nil, table)
		if err != nil {
			t.Fatalf("ParseTable(% x) = %+v, which AppendTable rejects: %v", b, table, err)
		}
		if !bytes.Equal(enc, b[:len(enc)]) {
			t.Fatalf("ParseTable then AppendTable = % x, want % x", enc, b[:len(enc)])
		}
	})
}
