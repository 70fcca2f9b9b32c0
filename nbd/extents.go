package nbd

import (
	"context"
	"errors"
	"fmt"
)

// ExtentAt is a run of bytes of the base:allocation context with the
// offset where it starts: what WalkExtents reports. Unlike Extent, which
// is one block status descriptor on the wire (a 32-bit length, no offset),
// its Length is an int64 and neighbours with the same flags are merged.
type ExtentAt struct {
	Offset int64
	Length int64
	Flags  ExtentFlags
}

// End returns the offset just past the extent.
func (e ExtentAt) End() int64 { return e.Offset + e.Length }

// Zero reports whether the extent reads as zeroes (ExtentZero), whether or
// not it is allocated.
func (e ExtentAt) Zero() bool { return e.Flags.Has(ExtentZero) }

// ErrNoProgress is returned by WalkExtents when a BlockStatuser describes
// no bytes (no extent, or one of length zero), which would loop forever.
var ErrNoProgress = errors.New("nbd: block status described no bytes")

// walkBatch is how many bytes one BlockStatus call of WalkExtents asks
// about: the most one BLOCK_STATUS request of the client covers.
const walkBatch = clientMaxCommandLength

// WalkExtents calls fn, in order, for the allocation extents of b over
// [off, off+length), each with its offset, calling b.BlockStatus as often
// as it takes (each call may describe fewer bytes than asked, as
// BlockStatuser allows). Neighbouring extents of one BlockStatus answer
// with the same flags are merged into one (extents of different answers
// are not, so fn sees each answer before the next is asked for), and the
// last one is cut at off+length, so the extents fn sees tile the range
// exactly. It works on any BlockStatuser: a
// *Client (base:allocation must have been negotiated), a *FileDisk, a
// *MemDisk. An error from b is returned naming the offset it was asked
// about; an error from fn stops the walk and is returned as it is.
//
// WalkExtents is as safe for concurrent use as b is; it keeps nothing
// after it returns. (*Client).WalkExtents walks any negotiated metadata
// context of a client, one descriptor at a time.
func WalkExtents(ctx context.Context, b BlockStatuser, off, length int64, fn func(e ExtentAt) error) error {
	if off < 0 || length < 0 {
		return fmt.Errorf("nbd: walk extents of [%d, +%d): %w", off, length, ErrOutOfRange)
	}
	var buf []Extent
	end := off + length
	for pos := off; pos < end; {
		var err error
		buf, err = b.BlockStatus(ctx, pos, min(end-pos, walkBatch), buf[:0])
		if err != nil {
			return fmt.Errorf("nbd: block status at %d: %w", pos, err)
		}
		start := pos
		pending := ExtentAt{Offset: pos}
		for _, e := range buf {
			if e.Length == 0 || pos >= end {
				break
			}
			n := min(int64(e.Length), end-pos)
			if pending.Length > 0 && pending.Flags == e.Flags {
				pending.Length += n
			} else {
				if pending.Length > 0 {
					if err := fn(pending); err != nil {
						return err
					}
				}
				pending = ExtentAt{Offset: pos, Length: n, Flags: e.Flags}
			}
			pos += n
		}
		if pos == start {
			return fmt.Errorf("%w: at %d", ErrNoProgress, pos)
		}
		if err := fn(pending); err != nil {
			return err
		}
	}
	return nil
}
