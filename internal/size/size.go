// Package size parses the byte counts the example programs take on their
// command lines: a decimal number with an optional binary suffix k, m or g
// (either case), as in 4096, 64k, 1m or 2G.
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
