package bridge

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nhdkit/nhd/checksum"
	"pgregory.net/rapid"
)

// TestVerifierProperties: what Fill writes, Check accepts and Sum knows
// the checksum of, at any block size and generation; a changed byte, a
// stale generation and another block's data are each caught, naming the
// block.
func TestVerifierProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := 16 * rapid.IntRange(1, 256).Draw(t, "bs16")
		blocks := rapid.IntRange(2, 8).Draw(t, "blocks")
		v := NewVerifier(int64(bs*blocks), bs, rapid.Uint64().Draw(t, "seed"))
		blk := rapid.IntRange(0, blocks-1).Draw(t, "blk")
		off := int64(blk * bs)
		p := make([]byte, bs)
		if err := v.Check(p, off); err == nil || !strings.Contains(err.Error(), "before it was written") {
			t.Fatalf("an unwritten block: %v", err)
		}
		for range rapid.IntRange(1, 5).Draw(t, "gens") {
			v.Fill(p, off)
		}
		if err := v.Check(p, off); err != nil {
			t.Fatal(err)
		}
		if got, want := v.Sum(p, off), checksum.Checksum(p, 0); got != want {
			t.Fatalf("Sum %#04x, the data's %#04x", got, want)
		}
		other := int64((blk + 1) % blocks * bs)
		if err := v.Check(p, other); err == nil {
			t.Fatal("block data read at another block's offset passed")
		}
		q := append([]byte(nil), p...)
		i := rapid.IntRange(0, bs-1).Draw(t, "i")
		q[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "x"))
		if err := v.Check(q, off); err == nil || !strings.Contains(err.Error(), "block "+strconv.Itoa(blk)) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
		v.Fill(q, off)
		if err := v.Check(p, off); err == nil {
			t.Fatal("the previous generation passed")
		}
	})
}
