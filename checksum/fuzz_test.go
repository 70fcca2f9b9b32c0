package checksum

import (
	"bytes"
	"testing"
)

// FuzzChecksum: every implementation, and the exported functions, agree
// with the reference for any input, start offset and initial value; copying
// copies; a split at any point joins back to the whole.
func FuzzChecksum(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzChecksum; these add the golden vectors.
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, uint16(0), uint8(0), uint16(3))
	f.Add(capturedSegment, uint16(0), uint8(20), uint16(17))
	f.Fuzz(func(t *testing.T, b []byte, initial uint16, off uint8, split uint16) {
		if int(off) > len(b) {
			off = uint8(len(b))
		}
		b = b[off:]
		want := refChecksum(b, initial)
		if got := Checksum(b, initial); got != want {
			t.Fatalf("Checksum(len %d) = %#04x, reference %#04x", len(b), got, want)
		}
		dst := make([]byte, len(b)+1)
		for _, im := range impls() {
			if got := implChecksum(im, b, initial); got != want {
				t.Fatalf("%s sum(len %d) = %#04x, reference %#04x", im.name, len(b), got, want)
			}
			clear(dst)
			if got := Combine(initial, finish(im.copySum(dst[:len(b)], b))); got != want || !bytes.Equal(dst[:len(b)], b) {
				t.Fatalf("%s copySum(len %d) = %#04x, reference %#04x", im.name, len(b), got, want)
			}
		}
		if got := CopyAndChecksum(dst, b, initial); got != want {
			t.Fatalf("CopyAndChecksum(len %d) = %#04x, reference %#04x", len(b), got, want)
		}
		k := int(split) % (len(b) + 1)
		if got := CombineAt(Checksum(b[:k], initial), Checksum(b[k:], 0), k); got != want {
			t.Fatalf("split at %d: %#04x, reference %#04x", k, got, want)
		}
		c := New(initial)
		c.Write(b[:k])
		c.Write(b[k:])
		if got := c.Sum16(); got != want {
			t.Fatalf("Checksummer split at %d: %#04x, reference %#04x", k, got, want)
		}
		if Verify(b, initial) != (want == 0xffff) {
			t.Fatalf("Verify disagrees with the sum %#04x", want)
		}
	})
}
