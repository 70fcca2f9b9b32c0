package dma

import (
	"errors"
	"fmt"
	"io"
	"sort"
)

// ErrRange reports a position or length outside a scatter-gather list.
var ErrRange = errors.New("dma: outside the scatter-gather list")

// SGList is a scatter-gather list over Go memory: an ordered list of
// regions ([]byte) seen as one contiguous range of positions 0..Len(). It
// holds the regions by reference, never copies them, and keeps its own
// slices, so Reset reuses them without allocating once they are large
// enough.
//
// An SGList is safe for concurrent reads (Locate, Segments, ReadAt); WriteAt
// and Reset need exclusive use, and WriteAt calls on disjoint ranges may run
// in parallel.
type SGList struct {
	regions [][]byte
	ends    []int64 // ends[i]: position just past regions[i]
}

// NewSGList returns a list over regions.
func NewSGList(regions ...[]byte) *SGList {
	l := &SGList{}
	l.Reset(regions...)
	return l
}

// Reset makes l a list over regions, dropping the old ones. Empty regions
// are kept (they cover no position).
func (l *SGList) Reset(regions ...[]byte) {
	l.regions = append(l.regions[:0], regions...)
	l.ends = l.ends[:0]
	var end int64
	for _, r := range regions {
		end += int64(len(r))
		l.ends = append(l.ends, end)
	}
}

// resetPRD makes l the list of t's regions in mem.
func (l *SGList) resetPRD(mem Memory, t []PRD) error {
	l.regions, l.ends = l.regions[:0], l.ends[:0]
	var end int64
	for i, p := range t {
		r, err := mem.Region(p.Addr, p.Len)
		if err != nil {
			l.regions, l.ends = l.regions[:0], l.ends[:0]
			return fmt.Errorf("dma: PRD entry %d: %w", i, err)
		}
		end += int64(len(r))
		l.regions = append(l.regions, r)
		l.ends = append(l.ends, end)
	}
	return nil
}

// Len returns the total size of the regions.
func (l *SGList) Len() int64 {
	if len(l.ends) == 0 {
		return 0
	}
	return l.ends[len(l.ends)-1]
}

// NumRegions returns the number of regions.
func (l *SGList) NumRegions() int { return len(l.regions) }

// Region returns region i.
func (l *SGList) Region(i int) []byte { return l.regions[i] }

// Locate returns the region holding position pos and the offset of pos in
// it; 0 <= pos < Len() or ErrRange. Empty regions are skipped.
func (l *SGList) Locate(pos int64) (region, off int, err error) {
	if pos < 0 || pos >= l.Len() {
		return 0, 0, fmt.Errorf("%w: position %d, length %d", ErrRange, pos, l.Len())
	}
	i := sort.Search(len(l.ends), func(i int) bool { return l.ends[i] > pos })
	return i, int(pos - (l.ends[i] - int64(len(l.regions[i])))), nil
}

// Segments appends to dst the pieces of the regions that make up positions
// [pos, pos+n), in order, each a subslice aliasing a region, and returns
// the extended slice. n == 0 appends nothing.
func (l *SGList) Segments(dst [][]byte, pos, n int64) ([][]byte, error) {
	if pos < 0 || n < 0 || pos+n > l.Len() {
		return dst, fmt.Errorf("%w: %d bytes at %d, length %d", ErrRange, n, pos, l.Len())
	}
	if n == 0 {
		return dst, nil
	}
	r, off, _ := l.Locate(pos)
	for n > 0 {
		seg := l.regions[r][off:]
		r, off = r+1, 0
		if len(seg) == 0 {
			continue
		}
		if int64(len(seg)) > n {
			seg = seg[:n]
		}
		dst = append(dst, seg)
		n -= int64(len(seg))
	}
	return dst, nil
}

// Sector appends to dst the pieces that make up sector i (positions
// i*SectorSize to (i+1)*SectorSize): one piece when the sector lies in one
// region, more when it straddles region boundaries.
func (l *SGList) Sector(dst [][]byte, i int64) ([][]byte, error) {
	return l.Segments(dst, i*SectorSize, SectorSize)
}

// SplitSectors appends to dst the pieces of positions [pos, pos+n) split
// both at region boundaries and at sector boundaries, so no piece crosses
// either: the units a device that moves one sector at a time works on.
func (l *SGList) SplitSectors(dst [][]byte, pos, n int64) ([][]byte, error) {
	if pos < 0 || n < 0 || pos+n > l.Len() {
		return dst, fmt.Errorf("%w: %d bytes at %d, length %d", ErrRange, n, pos, l.Len())
	}
	if n == 0 {
		return dst, nil
	}
	r, off, _ := l.Locate(pos)
	for n > 0 {
		seg := l.regions[r][off:]
		if len(seg) == 0 {
			r, off = r+1, 0
			continue
		}
		if room := SectorSize - pos%SectorSize; int64(len(seg)) > room {
			seg = seg[:room]
		}
		if int64(len(seg)) > n {
			seg = seg[:n]
		}
		dst = append(dst, seg)
		n -= int64(len(seg))
		pos += int64(len(seg))
		off += len(seg)
		if off == len(l.regions[r]) {
			r, off = r+1, 0
		}
	}
	return dst, nil
}

// ReadAt copies positions [off, off+len(p)) into p (io.ReaderAt). Reading
// past Len returns the bytes up to Len and io.EOF.
func (l *SGList) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: position %d", ErrRange, off)
	}
	if off >= l.Len() {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var c cursor
	c.seek(l, off)
	n := c.copyOut(l, p, nil)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt copies p to positions [off, off+len(p)) (io.WriterAt). Writing
// past Len writes nothing and returns ErrRange.
func (l *SGList) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > l.Len() {
		return 0, fmt.Errorf("%w: %d bytes at %d, length %d", ErrRange, len(p), off, l.Len())
	}
	if len(p) == 0 {
		return 0, nil
	}
	var c cursor
	c.seek(l, off)
	return c.copyIn(l, p, nil), nil
}

// cursor walks an SGList sequentially without searching: the engine keeps
// one per transfer side.
type cursor struct {
	r, off int
	copies int // copy calls made
}

// seek places c at position pos < l.Len().
func (c *cursor) seek(l *SGList, pos int64) {
	c.r, c.off, _ = l.Locate(pos)
}

// copyIn copies p into the list at c and advances c; with t, t copies and
// observes each piece in one pass. The caller checked the room.
func (c *cursor) copyIn(l *SGList, p []byte, t CopyTap) int {
	n := 0
	for n < len(p) {
		for c.off == len(l.regions[c.r]) {
			c.r, c.off = c.r+1, 0
		}
		dst, src := l.regions[c.r][c.off:], p[n:]
		if len(src) > len(dst) {
			src = src[:len(dst)]
		}
		k := len(src)
		if t != nil {
			t.CopyAndWrite(dst, src)
		} else {
			copy(dst, src)
		}
		c.copies++
		c.off += k
		n += k
	}
	return n
}

// copyOut copies from the list at c into p and advances c, stopping at the
// end of the list; with t, t copies and observes each piece in one pass.
func (c *cursor) copyOut(l *SGList, p []byte, t CopyTap) int {
	n := 0
	for n < len(p) && c.r < len(l.regions) {
		if c.off == len(l.regions[c.r]) {
			c.r, c.off = c.r+1, 0
			continue
		}
		dst, src := p[n:], l.regions[c.r][c.off:]
		if len(src) > len(dst) {
			src = src[:len(dst)]
		}
		k := len(src)
		if t != nil {
			t.CopyAndWrite(dst, src)
		} else {
			copy(dst, src)
		}
		c.copies++
		c.off += k
		n += k
	}
	return n
}
