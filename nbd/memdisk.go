package nbd

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
)

// MemDiskChunkSize is the allocation unit of a MemDisk: a chunk is
// allocated by the first write into it and freed by a Trim (or a
// WriteZeroes without FlagNoHole) that covers it whole.
const MemDiskChunkSize = PageSize

const memDiskStripes = 64 // lock stripes; chunk i uses stripe i % 64

// MemDisk is a sparse disk in memory: it allocates its 64 KiB chunks on
// first write and reports the rest as holes that read as zeroes. It is a
// Backend with every optional interface the server uses (Flusher,
// Trimmer, Zeroer, BlockStatuser, MultiConnBackend, Lender, PageTaker:
// the server sends reads from its memory and keeps whole-chunk writes
// without copying them) and is safe for
// concurrent use: chunks are guarded by striped locks, so requests on
// different chunks never wait for each other. Overlapping concurrent
// writes land in some order, as on any disk. Trimmed and zeroed ranges
// read as zeroes. Memory use is one pointer per chunk of Size plus the
// chunks written (and 4 bytes per chunk of Size that count the loans:
// see Lend).
type MemDisk struct {
	size      int64
	chunks    []*[MemDiskChunkSize]byte
	loans     []atomic.Int32 // per chunk: replies being sent from it
	locks     [memDiskStripes]memDiskLock
	allocated atomic.Int64
}

type memDiskLock struct {
	sync.RWMutex
	_ [64 - 24]byte // one cache line each
}

// NewMemDisk returns an empty MemDisk of size bytes.
func NewMemDisk(size int64) *MemDisk {
	if size < 0 {
		panic("nbd: NewMemDisk with negative size")
	}
	n := (size + MemDiskChunkSize - 1) / MemDiskChunkSize
	return &MemDisk{size: size, chunks: make([]*[MemDiskChunkSize]byte, n), loans: make([]atomic.Int32, n)}
}

// Size returns the size given to NewMemDisk.
func (d *MemDisk) Size() int64 { return d.size }

// Allocated returns the bytes of chunks allocated now.
func (d *MemDisk) Allocated() int64 { return d.allocated.Load() * MemDiskChunkSize }

// CanMultiConn reports true: there is no cache, every write is visible to
// every reader once WriteAt returns.
func (d *MemDisk) CanMultiConn() bool { return true }

// Flush does nothing: a MemDisk has nothing more durable to write to. It
// exists so the server advertises FLUSH and FUA, which its clients expect.
func (d *MemDisk) Flush(ctx context.Context) error { return nil }

func (d *MemDisk) lock(i int64) *memDiskLock { return &d.locks[i%memDiskStripes] }

// forEach calls f for each chunk piece of [off, off+n): chunk index, start
// within the chunk, and the piece's length.
func (d *MemDisk) forEach(off, n int64, f func(i int64, lo, k int)) {
	for n > 0 {
		i := off / MemDiskChunkSize
		lo := int(off % MemDiskChunkSize)
		k := int(min(int64(MemDiskChunkSize-lo), n))
		f(i, lo, k)
		off += int64(k)
		n -= int64(k)
	}
}

// ReadAt reads len(p) bytes at off; past Size it reads what there is and
// returns io.EOF.
func (d *MemDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("nbd: MemDisk read at negative offset %d: %w", off, syscall.EINVAL)
	}
	var err error
	if off >= d.size {
		return 0, io.EOF
	}
	if int64(len(p)) > d.size-off {
		p = p[:d.size-off]
		err = io.EOF
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := pos / MemDiskChunkSize
		lo := int(pos % MemDiskChunkSize)
		q := p[done:min(len(p), done+MemDiskChunkSize-lo)]
		l := d.lock(i)
		l.RLock()
		if c := d.chunks[i]; c != nil {
			copy(q, c[lo:])
		} else {
			clear(q)
		}
		l.RUnlock()
		done += len(q)
	}
	return len(p), err
}

// WriteAt writes p at off, allocating the chunks it touches. A write past
// Size fails with an error matching syscall.ENOSPC and writes nothing.
func (d *MemDisk) WriteAt(p []byte, off int64) (int, error) {
	if err := d.bounds("write", off, int64(len(p)), syscall.ENOSPC); err != nil {
		return 0, err
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := pos / MemDiskChunkSize
		lo := int(pos % MemDiskChunkSize)
		q := p[done:min(len(p), done+MemDiskChunkSize-lo)]
		l := d.lock(i)
		l.Lock()
		c := d.writable(i)
		if c == nil {
			c = new([MemDiskChunkSize]byte)
			d.chunks[i] = c
			d.allocated.Add(1)
		}
		copy(c[lo:], q)
		l.Unlock()
		done += len(q)
	}
	return len(p), nil
}

// TakePage makes p the chunk at off, a multiple of MemDiskChunkSize, and
// returns the chunk it replaces (nil if none was allocated): the server's
// whole-chunk writes land without a copy (PageTaker). It reports false,
// changing nothing, for a chunk outside the disk or cut short by its end.
// The caller gives up p and owns the returned chunk: readers copy chunks
// under the stripe lock, and a chunk lent (see Lend) is not returned.
func (d *MemDisk) TakePage(p *[MemDiskChunkSize]byte, off int64) (*[MemDiskChunkSize]byte, bool) {
	if off < 0 || off%MemDiskChunkSize != 0 || off > d.size-MemDiskChunkSize {
		return nil, false
	}
	i := off / MemDiskChunkSize
	l := d.lock(i)
	l.Lock()
	old := d.chunks[i]
	d.chunks[i] = p
	lent := d.loans[i].Load() != 0
	l.Unlock()
	if old == nil {
		d.allocated.Add(1)
	}
	if lent {
		// A reply is being sent from old: it stays theirs (and the
		// garbage collector's), the caller allocates its next page.
		return nil, true
	}
	return old, true
}

// writable returns chunk i ready to be written in place: while the server
// lends it (see Lend) it is first replaced by a copy, so a reply being
// sent from it keeps the data it had. Call with i's stripe locked for
// writing.
func (d *MemDisk) writable(i int64) *[MemDiskChunkSize]byte {
	c := d.chunks[i]
	if c != nil && d.loans[i].Load() != 0 {
		cp := new([MemDiskChunkSize]byte)
		*cp = *c
		d.chunks[i] = cp
		c = cp
	}
	return c
}

// Lend appends to pieces the pieces of [off, off+n), inside the disk, one
// per chunk piece: a slice of the chunk's own memory, or a hole, and
// lends the chunks until GiveBack(off, n): meanwhile writes to them land
// in copies (writable), so the pieces keep the data they showed. That is
// how the server sends a read reply straight from the disk's memory,
// without copying it into a buffer first (Lender).
func (d *MemDisk) Lend(off, n int64, pieces []LentPiece) []LentPiece {
	for n > 0 {
		i := off / MemDiskChunkSize
		lo := int(off % MemDiskChunkSize)
		k := int(min(int64(MemDiskChunkSize-lo), n))
		l := d.lock(i)
		l.RLock()
		d.loans[i].Add(1)
		p := LentPiece{Len: k}
		if c := d.chunks[i]; c != nil {
			p.Data = c[lo : lo+k : lo+k]
		}
		l.RUnlock()
		pieces = append(pieces, p)
		off += int64(k)
		n -= int64(k)
	}
	return pieces
}

// GiveBack ends the loan of [off, off+n) that Lend made.
func (d *MemDisk) GiveBack(off, n int64) {
	if n <= 0 {
		return
	}
	for i, end := off/MemDiskChunkSize, (off+n-1)/MemDiskChunkSize; i <= end; i++ {
		d.loans[i].Add(-1)
	}
}

func (d *MemDisk) bounds(op string, off, n int64, e syscall.Errno) error {
	if off < 0 || n < 0 || off > d.size || n > d.size-off {
		return fmt.Errorf("nbd: MemDisk %s of %d bytes at %d outside its %d bytes: %w", op, n, off, d.size, e)
	}
	return nil
}

// Trim frees the chunks [off, off+length) covers whole and zeroes the
// rest of the range, so the range reads as zeroes afterwards.
func (d *MemDisk) Trim(ctx context.Context, off, length int64) error {
	if err := d.bounds("trim", off, length, syscall.EINVAL); err != nil {
		return err
	}
	d.zero(off, length, true)
	return nil
}

// WriteZeroes makes [off, off+length) read as zeroes: like Trim, unless
// flags has FlagNoHole, which keeps (or allocates) the chunks. It is
// always fast, so FlagFastZero never fails.
func (d *MemDisk) WriteZeroes(ctx context.Context, off, length int64, flags CmdFlags) error {
	if err := d.bounds("write zeroes", off, length, syscall.ENOSPC); err != nil {
		return err
	}
	d.zero(off, length, !flags.Has(FlagNoHole))
	return nil
}

func (d *MemDisk) zero(off, n int64, punch bool) {
	d.forEach(off, n, func(i int64, lo, k int) {
		l := d.lock(i)
		l.Lock()
		c := d.chunks[i]
		switch {
		case c == nil && punch:
		case punch && k == MemDiskChunkSize:
			d.chunks[i] = nil
			d.allocated.Add(-1)
		case c == nil:
			d.chunks[i] = new([MemDiskChunkSize]byte)
			d.allocated.Add(1)
		default:
			clear(d.writable(i)[lo : lo+k])
		}
		l.Unlock()
	})
}

// BlockStatus appends extents for [off, off+length): unallocated chunks as
// ExtentHole|ExtentZero, allocated ones as 0 (data), neighbours with the
// same flags merged.
func (d *MemDisk) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	if err := d.bounds("block status", off, length, syscall.EINVAL); err != nil {
		return dst, err
	}
	start := len(dst)
	d.forEach(off, length, func(i int64, lo, k int) {
		l := d.lock(i)
		l.RLock()
		hole := d.chunks[i] == nil
		l.RUnlock()
		var f ExtentFlags
		if hole {
			f = ExtentHole | ExtentZero
		}
		if n := len(dst); n > start && dst[n-1].Flags == f && uint64(dst[n-1].Length)+uint64(k) <= 1<<31 {
			dst[n-1].Length += uint32(k)
			return
		}
		dst = append(dst, Extent{Length: uint32(k), Flags: f})
	})
	return dst, nil
}
