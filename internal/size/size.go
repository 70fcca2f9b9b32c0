package size

import (
	"errors"
	"strconv"
)

// ErrSyntax is returned for anything that is not a non-negative whole number
// with an optional k, m or g suffix, or that overflows an int64.
var ErrSyntax = errors.New("size: want a whole number of bytes such as 4096, 64k, 1m or 2g")

// Parse returns the number of bytes s names. Zero is allowed; callers that
// need a positive size check for it.
func Parse(s string) (int64, error) {
	shift := 0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			shift, s = 10, s[:n-1]
		case 'm', 'M':
			shift, s = 20, s[:n-1]
		case 'g', 'G':
			shift, s = 30, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<63-1)>>shift {
		return 0, ErrSyntax
	}
	return v << shift, nil
}

// Text formats n in the largest binary unit that divides it: "64 KiB",
// "1 GiB", "1536 B". It is the inverse of Parse for the sizes programs
// print.
func Text(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
