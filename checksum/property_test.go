package checksum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// data draws byte strings long enough to cross every strategy switch below
// 2 KiB (the length is drawn first so long ones are common), with bytes
// biased by rapid towards edge values such as 0x00 and 0xff.
func data(t *rapid.T, label string) []byte {
	n := rapid.IntRange(0, 2100).Draw(t, label+" length")
	return rapid.SliceOfN(rapid.Byte(), n, n).Draw(t, label)
}

// TestPropSplitCombine: split anywhere, sum the pieces, combine: the result is
// the sum of the whole, for every implementation.
func TestPropSplitCombine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := data(t, "data")
		k := rapid.IntRange(0, len(d)).Draw(t, "split")
		initial := rapid.Uint16().Draw(t, "initial")
		whole := Checksum(d, initial)
		if want := refChecksum(d, initial); whole != want {
			t.Fatalf("Checksum = %#04x, reference %#04x", whole, want)
		}
		a, b := Checksum(d[:k], initial), Checksum(d[k:], 0)
		var joined uint16
		if k%2 == 0 {
			joined = Combine(a, b)
		} else {
			joined = CombineOdd(a, b)
		}
		if joined != whole {
			t.Fatalf("split at %d of %d: joined %#04x, whole %#04x", k, len(d), joined, whole)
		}
		if got := CombineAt(a, b, k); got != whole {
			t.Fatalf("CombineAt split at %d: %#04x, whole %#04x", k, got, whole)
		}
		for _, im := range impls() {
			a, b := implChecksum(im, d[:k], initial), implChecksum(im, d[k:], 0)
			if got := CombineAt(a, b, k); got != whole {
				t.Fatalf("%s: split at %d: %#04x, whole %#04x", im.name, k, got, whole)
			}
		}
	})
}

// TestPropParallelChunks: sums of chunks computed independently (as parallel
// workers would) and joined by offset in any order equal the whole.
func TestPropParallelChunks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := data(t, "data")
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(d)), 0, 8).Draw(t, "cuts")
		bounds := append([]int{0}, cuts...)
		bounds = append(bounds, len(d))
		var s uint16
		// Join in reverse order: ones' complement addition commutes.
		for i := len(bounds) - 1; i > 0; i-- {
			lo, hi := min(bounds[i-1], bounds[i]), max(bounds[i-1], bounds[i])
			s = CombineAt(s, Checksum(d[lo:hi], 0), lo)
		}
		// Overlapping or reversed cut lists sum some bytes twice; compare
		// against the same pieces summed by the reference.
		var want uint64
		for i := len(bounds) - 1; i > 0; i-- {
			lo, hi := min(bounds[i-1], bounds[i]), max(bounds[i-1], bounds[i])
			pad := make([]byte, lo%2)
			want += uint64(refChecksum(append(pad, d[lo:hi]...), 0))
		}
		if w := refFold(want); s != w {
			t.Fatalf("joined %#04x, reference %#04x", s, w)
		}
	})
}

// TestPropIncremental: a Checksummer fed random chunks, by Write or
// CopyAndWrite, gives the one-shot sum.
func TestPropIncremental(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := data(t, "data")
		initial := rapid.Uint16().Draw(t, "initial")
		c := New(initial)
		dst := make([]byte, len(d))
		for rest, off := d, 0; len(rest) > 0; {
			n := rapid.IntRange(1, len(rest)).Draw(t, "chunk")
			if rapid.Bool().Draw(t, "copy") {
				if got := c.CopyAndWrite(dst[off:], rest[:n]); got != n {
					t.Fatalf("CopyAndWrite returned %d, want %d", got, n)
				}
			} else {
				if got, err := c.Write(rest[:n]); got != n || err != nil {
					t.Fatalf("Write returned %d, %v", got, err)
				}
				copy(dst[off:], rest[:n])
			}
			rest, off = rest[n:], off+n
		}
		want := Checksum(d, initial)
		if got := c.Sum16(); got != want {
			t.Fatalf("incremental %#04x, one-shot %#04x", got, want)
		}
		if diff := cmp.Diff(binary.BigEndian.AppendUint16([]byte{9}, want), c.Sum([]byte{9})); diff != "" {
			t.Fatalf("Sum appended wrongly (-want +got):\n%s", diff)
		}
		if c.Len() != uint64(len(d)) {
			t.Fatalf("Len = %d, want %d", c.Len(), len(d))
		}
		if !bytes.Equal(dst, d) {
			t.Fatal("CopyAndWrite did not copy")
		}
	})
}

// TestPropUpdate: RFC 1624's incremental update of a checksum field equals
// recomputing the field, for one 16-bit word (Update) or an aligned 32-bit
// value (Update32) anywhere in the covered data.
func TestPropUpdate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		words := rapid.IntRange(3, 40).Draw(t, "words")
		d := rapid.SliceOfN(rapid.Byte(), 2*words, 2*words).Draw(t, "data")
		if rapid.Bool().Draw(t, "zeros") {
			clear(d) // the all-zero corner RFC 1624 discusses
		}
		initial := rapid.Uint16().Draw(t, "pseudo-header")
		f := 2 * rapid.IntRange(0, words-1).Draw(t, "field word")
		binary.BigEndian.PutUint16(d[f:], fieldFor(d, f, initial))
		w := 2 * rapid.IntRange(0, words-2).Draw(t, "changed word")
		if w >= f {
			w += 2 // never the field itself
		}
		wide := w+4 <= len(d) && (w+4 <= f || w >= f+2) && rapid.Bool().Draw(t, "32-bit")
		field := binary.BigEndian.Uint16(d[f:])
		var got uint16
		if wide {
			old := binary.BigEndian.Uint32(d[w:])
			nv := rapid.Uint32().Draw(t, "new")
			binary.BigEndian.PutUint32(d[w:], nv)
			got = Update32(field, old, nv)
		} else {
			old := binary.BigEndian.Uint16(d[w:])
			nv := rapid.Uint16().Draw(t, "new")
			binary.BigEndian.PutUint16(d[w:], nv)
			got = Update(field, old, nv)
		}
		want := fieldFor(d, f, initial)
		if got == want {
			binary.BigEndian.PutUint16(d[f:], got)
			if !Verify(d, initial) && Checksum(d, initial) != 0 {
				t.Fatalf("Verify failed after Update (sum %#04x)", Checksum(d, initial))
			}
			return
		}
		// The one allowed difference: the rest sums to zero, recomputation
		// gives 0xffff, the update 0x0000 (both are ones' complement zero).
		z := bytes.Clone(d)
		z[f], z[f+1] = 0, 0
		if !(Checksum(z, initial) == 0 && want == 0xffff && got == 0x0000) {
			t.Fatalf("Update gave %#04x, recomputation %#04x", got, want)
		}
	})
}

// TestPropChecksummerMachine runs a Checksummer against the simplest model:
// the bytes written so far and the initial value.
func TestPropChecksummerMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		initial := rapid.Uint16().Draw(t, "initial")
		c := New(initial)
		var model []byte
		type view struct {
			Sum16 uint16
			Len   uint64
			Sum   []byte
		}
		viewOf := func(c *Checksummer) view { return view{c.Sum16(), c.Len(), c.Sum(nil)} }
		want := func() view {
			s := Checksum(model, initial)
			return view{s, uint64(len(model)), []byte{byte(s >> 8), byte(s)}}
		}
		t.Repeat(map[string]func(*rapid.T){
			"Write": func(t *rapid.T) {
				p := rapid.SliceOfN(rapid.Byte(), 0, 600).Draw(t, "p")
				c.Write(p)
				model = append(model, p...)
			},
			"CopyAndWrite": func(t *rapid.T) {
				p := rapid.SliceOfN(rapid.Byte(), 0, 600).Draw(t, "p")
				dst := make([]byte, len(p)+rapid.IntRange(0, 3).Draw(t, "slack"))
				c.CopyAndWrite(dst, p)
				if !bytes.Equal(dst[:len(p)], p) {
					t.Fatal("CopyAndWrite did not copy")
				}
				model = append(model, p...)
			},
			"Reset": func(t *rapid.T) {
				c.Reset()
				model = model[:0]
			},
			"Clone": func(t *rapid.T) {
				d, err := c.Clone()
				if err != nil {
					t.Fatal(err)
				}
				// Writing to the clone leaves the original alone.
				d.Write([]byte{1, 2, 3})
				if diff := cmp.Diff(want(), viewOf(c)); diff != "" {
					t.Fatalf("clone shares state (-want +got):\n%s", diff)
				}
				c = d.(*Checksummer)
				model = append(model, 1, 2, 3)
			},
			"MarshalRoundTrip": func(t *rapid.T) {
				st, err := c.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				var d Checksummer
				if err := d.UnmarshalBinary(st); err != nil {
					t.Fatal(err)
				}
				c = &d
			},
			"": func(t *rapid.T) {
				if diff := cmp.Diff(want(), viewOf(c)); diff != "" {
					t.Fatalf("state differs from model (-want +got):\n%s", diff)
				}
			},
		})
	})
}

func TestChecksummerState(t *testing.T) {
	c := New(0x1234)
	c.Write([]byte{0xab, 0xcd, 0xef})
	st, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	// magic "nhdc", initial 1234, sum 1234+abcd+ef00 = 0x1_ad01 -> ad02, length 3.
	want := []byte{'n', 'h', 'd', 'c', 0x12, 0x34, 0xad, 0x02, 0, 0, 0, 0, 0, 0, 0, 3}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Fatalf("MarshalBinary (-want +got):\n%s", diff)
	}
	if got, _ := c.AppendBinary([]byte{7}); !bytes.Equal(got, append([]byte{7}, want...)) {
		t.Fatalf("AppendBinary = % x", got)
	}
	for _, bad := range [][]byte{nil, want[:15], append(bytes.Clone(want), 0), append([]byte("nhdC"), want[4:]...)} {
		d := New(0x5555)
		if err := d.UnmarshalBinary(bad); !errors.Is(err, ErrInvalidState) {
			t.Errorf("UnmarshalBinary(% x) = %v, want ErrInvalidState", bad, err)
		}
		if d.Sum16() != 0x5555 || d.Len() != 0 {
			t.Errorf("failed UnmarshalBinary changed the state")
		}
	}
	var d Checksummer
	if err := d.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	d.Write([]byte{0x01})
	c.Write([]byte{0x01})
	if d.Sum16() != c.Sum16() {
		t.Errorf("resumed sum %#04x, original %#04x", d.Sum16(), c.Sum16())
	}
	d.Reset()
	if d.Sum16() != 0x1234 || d.Len() != 0 {
		t.Errorf("Reset after UnmarshalBinary: sum %#04x len %d, want 0x1234 0", d.Sum16(), d.Len())
	}
	if c.Size() != 2 || c.BlockSize() != 2 {
		t.Errorf("Size, BlockSize = %d, %d", c.Size(), c.BlockSize())
	}
	var zero Checksummer
	zero.Write([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7})
	if zero.Sum16() != 0xddf2 {
		t.Errorf("zero-value Checksummer: %#04x, want 0xddf2", zero.Sum16())
	}
}
