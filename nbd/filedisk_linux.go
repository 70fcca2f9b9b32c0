package nbd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileDisk is a Backend on an open file (or block device): ReadAt and
// WriteAt are pread and pwrite, Flush and FUA writes use fdatasync, Trim
// and WriteZeroes punch holes with fallocate (WriteZeroes with FlagNoHole
// uses FALLOC_FL_ZERO_RANGE), and BlockStatus finds holes with SEEK_DATA
// and SEEK_HOLE. Where the file system lacks fallocate modes, Trim does
// nothing and WriteZeroes writes zeroes (or fails with ENOTSUP under
// FlagFastZero). It is safe for concurrent use; its size is fixed when it
// is made. It owns its file (Close closes it) when made by
// OpenFileDiskWith or CreateFileDisk, not when made by NewFileDisk.
//
// FileDisk is not a Lender: its bytes live in the kernel's page cache,
// which a process reaches only by copying (pread) or through a shared
// mapping that a concurrent write could change under a reply being sent.
// Its zero-copy path would be sendfile(2) or splice(2) from the file to the
// socket, which the server does not take.
type FileDisk struct {
	f       *os.File
	fd      int
	size    int64
	blksize uint32 // st_blksize: the preferred block
	own     bool   // Close closes f
	closed  atomic.Bool
	// readOnly refuses changes (FileDiskOptions.ReadOnly).
	readOnly bool
	// seek is lseek(2), a seam for tests that count what BlockStatus
	// costs; nil means unix.Seek.
	seek func(fd int, offset int64, whence int) (int64, error)
}

// NewFileDisk serves f, whose size (or block device size) is read now.
func NewFileDisk(f *os.File) (*FileDisk, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if fi.Mode()&os.ModeDevice != 0 {
		// A block device's size comes from seeking to its end.
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			return nil, fmt.Errorf("nbd: size of %s: %w", f.Name(), err)
		}
	}
	blksize := uint32(4096)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blksize > 0 && st.Blksize&(st.Blksize-1) == 0 && st.Blksize <= 1<<20 {
		blksize = uint32(st.Blksize)
	}
	return &FileDisk{f: f, fd: int(f.Fd()), size: size, blksize: blksize}, nil
}

// BlockSize reports no alignment (1: pread and pwrite go through the page
// cache), the file system's preferred I/O size (st_blksize) and no limit
// on one call (math.MaxUint32).
func (d *FileDisk) BlockSize() (minimum, preferred, maxPayload uint32) {
	return 1, d.blksize, math.MaxUint32
}

// FileDiskOptions tune OpenFileDiskWith and CreateFileDisk.
type FileDiskOptions struct {
	// ReadOnly opens the file read-only: WriteAt, WriteAtFUA, Trim and
	// WriteZeroes then fail with an error matching syscall.EPERM (what
	// the server answers for a read-only export) without touching it.
	ReadOnly bool
	// Perm is the permission of a file CreateFileDisk creates, before the
	// umask (0 means 0o644).
	Perm os.FileMode
	// Exclusive makes CreateFileDisk fail if path exists (O_EXCL).
	Exclusive bool
}

// OpenFileDisk opens path read-write (read-only if readOnly) and serves
// it; Close closes the file.
//
// Deprecated: use OpenFileDiskWith(path, FileDiskOptions{ReadOnly:
// readOnly}), which also refuses writes to a read-only disk by itself.
func OpenFileDisk(path string, readOnly bool) (*FileDisk, error) {
	return OpenFileDiskWith(path, FileDiskOptions{ReadOnly: readOnly})
}

// OpenFileDiskWith opens an existing file or block device at path and
// serves it. The FileDisk owns the file: Close closes it.
func OpenFileDiskWith(path string, opts FileDiskOptions) (*FileDisk, error) {
	flag := os.O_RDWR
	if opts.ReadOnly {
		flag = os.O_RDONLY
	}
	return fileDiskOpen(path, flag, 0, opts, -1)
}

// CreateFileDisk creates a regular file at path (or truncates the one
// there, unless opts.Exclusive) as a sparse file of size bytes that reads
// as zeroes, and serves it. The FileDisk owns the file: Close closes it.
// A read-only FileDiskOptions is refused.
func CreateFileDisk(path string, size int64, opts FileDiskOptions) (*FileDisk, error) {
	if opts.ReadOnly {
		return nil, fmt.Errorf("nbd: CreateFileDisk %s read-only: %w", path, syscall.EINVAL)
	}
	if size < 0 {
		return nil, fmt.Errorf("nbd: CreateFileDisk %s of %d bytes: %w", path, size, syscall.EINVAL)
	}
	flag := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if opts.Exclusive {
		flag |= os.O_EXCL
	}
	perm := opts.Perm
	if perm == 0 {
		perm = 0o644
	}
	return fileDiskOpen(path, flag, perm, opts, size)
}

// fileDiskOpen opens path and makes the FileDisk that owns it, after
// setting its size unless size is negative.
func fileDiskOpen(path string, flag int, perm os.FileMode, opts FileDiskOptions, size int64) (*FileDisk, error) {
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, err
		}
	}
	d, err := NewFileDisk(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	d.own, d.readOnly = true, opts.ReadOnly
	return d, nil
}

// Close closes the file if the FileDisk owns it (OpenFileDiskWith,
// CreateFileDisk, OpenFileDisk); a FileDisk from NewFileDisk leaves its
// file to the caller, who closes it after the FileDisk's last use. Close
// does not flush: call Flush first for durability. Calls after the first
// return nil and close nothing.
func (d *FileDisk) Close() error {
	if !d.own || !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	return d.f.Close()
}

// ReadOnly reports whether the FileDisk refuses changes
// (FileDiskOptions.ReadOnly), for an Export's ReadOnly.
func (d *FileDisk) ReadOnly() bool { return d.readOnly }

// errFileDiskReadOnly is the error of a change to a read-only FileDisk.
var errFileDiskReadOnly = fmt.Errorf("nbd: FileDisk is read-only: %w", syscall.EPERM)

// Size returns the size of the file when the FileDisk was made.
func (d *FileDisk) Size() int64 { return d.size }

// CanMultiConn reports true: every connection writes to the same file,
// and fdatasync makes all of its writes durable.
func (d *FileDisk) CanMultiConn() bool { return true }

// ReadAt reads with pread; past the file's current end (a file that
// shrank after NewFileDisk) it returns io.EOF, which the server answers
// with EIO.
func (d *FileDisk) ReadAt(p []byte, off int64) (int, error) { return d.f.ReadAt(p, off) }

// WriteAt writes with pwrite. A write past Size fails with an error
// matching syscall.ENOSPC.
func (d *FileDisk) WriteAt(p []byte, off int64) (int, error) {
	if d.readOnly {
		return 0, errFileDiskReadOnly
	}
	if off < 0 || int64(len(p)) > d.size-off {
		return 0, fmt.Errorf("nbd: FileDisk write of %d bytes at %d past its %d bytes: %w", len(p), off, d.size, syscall.ENOSPC)
	}
	return d.f.WriteAt(p, off)
}

// WriteAtFUA writes and then runs fdatasync.
func (d *FileDisk) WriteAtFUA(p []byte, off int64) (int, error) {
	n, err := d.WriteAt(p, off)
	if err == nil {
		err = d.Flush(context.Background())
	}
	return n, err
}

// Flush runs fdatasync on the file.
func (d *FileDisk) Flush(ctx context.Context) error {
	return serverRetry(func() error { return unix.Fdatasync(d.fd) })
}

func serverRetry(f func() error) error {
	for {
		err := f()
		if err != unix.EINTR {
			return err
		}
	}
}

func (d *FileDisk) inRange(off, n int64) bool {
	return off >= 0 && n >= 0 && off <= d.size && n <= d.size-off
}

// Trim punches a hole (FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE); on a file
// system without it, it does nothing, as NBD allows.
func (d *FileDisk) Trim(ctx context.Context, off, length int64) error {
	if d.readOnly {
		return errFileDiskReadOnly
	}
	if !d.inRange(off, length) {
		return fmt.Errorf("nbd: FileDisk trim past its end: %w", syscall.EINVAL)
	}
	if length == 0 {
		return nil
	}
	err := d.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	return err
}

func (d *FileDisk) fallocate(mode uint32, off, length int64) error {
	return serverRetry(func() error { return unix.Fallocate(d.fd, mode, off, length) })
}

// WriteZeroes punches a hole, or with FlagNoHole zeroes the range in place
// (FALLOC_FL_ZERO_RANGE); where the file system has neither it writes
// zeroes, unless FlagFastZero asks it to fail with ENOTSUP instead.
func (d *FileDisk) WriteZeroes(ctx context.Context, off, length int64, flags CmdFlags) error {
	if d.readOnly {
		return errFileDiskReadOnly
	}
	if !d.inRange(off, length) {
		return fmt.Errorf("nbd: FileDisk write zeroes past its end: %w", syscall.ENOSPC)
	}
	if length == 0 {
		return nil
	}
	mode := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	if flags.Has(FlagNoHole) {
		mode = unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	}
	err := d.fallocate(mode, off, length)
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENODEV) {
		return err
	}
	if flags.Has(FlagFastZero) {
		return ENOTSUP
	}
	for length > 0 {
		k := min(length, int64(len(serverZeroes)))
		if _, err := d.f.WriteAt(serverZeroes[:k], off); err != nil {
			return err
		}
		off += k
		length -= k
	}
	return nil
}

// fileDiskMaxExtents bounds the extents one FileDisk.BlockStatus call
// appends: on a fragmented file it describes fewer bytes than asked (as
// BlockStatuser allows) rather than walking every extent of the range.
const fileDiskMaxExtents = serverMaxExtents

// BlockStatus appends extents for [off, off+length) found with SEEK_DATA
// and SEEK_HOLE: holes as ExtentHole|ExtentZero, data as 0. It appends
// at most 4096 extents, the most one block status reply of the server
// holds: on a fragmented file they cover less than length, and the call
// costs at most about one seek per extent whatever the file's
// fragmentation. Where the file system cannot tell, all of it is data.
func (d *FileDisk) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	if !d.inRange(off, length) {
		return dst, fmt.Errorf("nbd: FileDisk block status past its end: %w", syscall.EINVAL)
	}
	seek := d.seek
	if seek == nil {
		seek = unix.Seek
	}
	start, end := len(dst), off+length
	// add appends [off, to) as extents of at most 1 GiB and moves off; it
	// reports false once the budget is spent.
	add := func(to int64, f ExtentFlags) bool {
		for off < to {
			if len(dst)-start == fileDiskMaxExtents {
				return false
			}
			k := min(to-off, 1<<30)
			dst = append(dst, Extent{Length: uint32(k), Flags: f})
			off += k
		}
		return len(dst)-start < fileDiskMaxExtents
	}
	for off < end {
		data, err := seek(d.fd, off, unix.SEEK_DATA)
		switch {
		case err == unix.ENXIO:
			// No data from off to the end of the file.
			add(end, ExtentHole|ExtentZero)
			return dst, nil
		case err != nil:
			if len(dst) == start {
				add(end, 0) // cannot tell: data
			}
			return dst, nil
		}
		if data > off && !add(min(data, end), ExtentHole|ExtentZero) || off >= end {
			return dst, nil
		}
		// off is at data: its end is the next hole.
		hole, err := seek(d.fd, off, unix.SEEK_HOLE)
		if err != nil || hole <= off {
			add(end, 0)
			return dst, nil
		}
		if !add(min(hole, end), 0) {
			return dst, nil
		}
	}
	return dst, nil
}
