package size

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "512": 512, "4096": 4096, "4k": 4096, "64K": 65536, "1m": 1 << 20,
		"2g": 2 << 30, "2G": 2 << 30, "8589934591g": 8589934591 << 30,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-1", "-4k", "x4", "4x", "1.5m", " 4k", "8589934592g", "9223372036854775808"} {
		if got, err := Parse(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %d, %v, want ErrSyntax", in, got, err)
		}
	}
}

func TestText(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 512: "512 B", 1536: "1536 B", 1 << 10: "1 KiB", 64 << 10: "64 KiB",
		3 << 20: "3 MiB", 1<<20 + 1<<10: "1025 KiB", 4 << 30: "4 GiB",
	} {
		if got := Text(n); got != want {
			t.Errorf("Text(%d) = %q, want %q", n, got, want)
		}
	}
}
