package zerocopy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// ErrNoFD is recorded as SendStats.LastRefusal when a Sender's destination
// exposes no file descriptor: it does not implement syscall.Conn, which is
// what happens to a net.Conn wrapped in another type. Such a destination
// only ever takes the copy path.
var ErrNoFD = errors.New("zerocopy: destination exposes no file descriptor (not a syscall.Conn)")

// Path names the mechanism that moved bytes to a Sender's destination.
type Path uint8

// The paths, from cheapest to dearest.
const (
	PathNone     Path = iota // nothing moved yet
	PathSplice               // splice(2) through a pipe: no user-space crossing
	PathSendfile             // sendfile(2) from a file: no user-space crossing
	PathCopy                 // read into a user buffer, then write: two crossings per byte
)

var pathNames = [...]string{"none", "splice", "sendfile", "copy"}

// String returns the path's name: "none", "splice", "sendfile" or "copy".
func (p Path) String() string {
	if int(p) < len(pathNames) {
		return pathNames[p]
	}
	return fmt.Sprintf("Path(%d)", uint8(p))
}

// PathStats counts the calls that used one path and the bytes it moved.
type PathStats struct {
	Calls int64
	Bytes int64
}

// SendStats is a snapshot of a Sender's counters: which path ran, how often,
// and why the kernel paths were refused.
type SendStats struct {
	Splice, Sendfile, Copy PathStats
	// Fallbacks counts the calls in which a zero-copy path was refused (by
	// the kernel, or for want of a file descriptor) and the copy path took
	// over the remaining bytes.
	Fallbacks int64
	// LastPath is the path of the last call (the copy path if it fell back).
	LastPath Path
	// LastRefusal is the reason for the last fallback: a syscall.Errno
	// such as EINVAL or ENOSYS, or ErrNoFD. Nil if there was none.
	LastRefusal error
}

// Sender moves bytes from files and sockets to one destination (typically a
// *net.TCPConn or *net.UnixConn) by the kernel's zero-copy paths: sendfile(2)
// from a regular file, splice(2) through a private pipe from a socket, pipe
// or file. Where the kernel refuses (EINVAL, ENOSYS, EOPNOTSUPP, EXDEV: an
// fd type it cannot splice, a destination opened O_APPEND, an old kernel) or
// the destination has no file descriptor, the Sender falls back to a plain
// read/write copy through its own buffer, moving the remaining bytes
// without losing any (bytes already in the pipe are drained to the
// destination first). SendStats says which path ran.
//
// The zero-copy paths need the destination's file descriptor, so dst must
// implement syscall.Conn: a net.Conn wrapped in another type loses them
// silently unless the wrapper forwards SyscallConn (the Sender does not
// unwrap on its own: writing under a TLS wrapper would bypass encryption).
//
// The bytes are copied by the kernel into the destination before each call
// returns, so the sources may be reused right after (unlike vmsplice, which
// the Sender does not use: there the pipe would keep referencing user pages).
// To allocate nothing per call, the Sender remembers the last source
// (*os.File, *net.TCPConn or *net.UnixConn) and its RawConn until a call with
// another source or Close; it never reads from it outside a call.
//
// A Sender is not safe for concurrent use. Close releases its pipe, not dst.
type Sender struct {
	dst    io.Writer
	rc     syscall.RawConn // dst's, nil when it has no fd
	rcErr  error
	acct   *Accounting
	buf    []byte // copy path buffer, allocated on first use
	stats  SendStats
	src    srcCache
	kernel kernelState // platform state: pipe, callbacks
}

// srcCache remembers the last source's RawConn (SyscallConn allocates) for
// the pointer types where comparing is safe and cheap.
type srcCache struct {
	conn    syscall.Conn
	rc      syscall.RawConn
	regular int8 // 0 unknown, 1 regular file, -1 not
}

// srcRawConn returns c's RawConn, from the cache when c is the last source.
func (s *Sender) srcRawConn(c syscall.Conn) (syscall.RawConn, error) {
	if c == s.src.conn && s.src.rc != nil {
		return s.src.rc, nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	switch c.(type) {
	case *os.File, *net.TCPConn, *net.UnixConn:
		s.src = srcCache{conn: c, rc: rc}
	}
	return rc, nil
}

// NewSender returns a Sender writing to dst.
func NewSender(dst io.Writer) *Sender {
	s := &Sender{dst: dst}
	if sc, ok := dst.(syscall.Conn); ok {
		rc, err := sc.SyscallConn()
		if err == nil {
			s.rc = rc
		} else {
			s.rcErr = err
		}
	} else {
		s.rcErr = ErrNoFD
	}
	s.kernel.init(s)
	return s
}

// SetAccounting makes the Sender record its crossings (copy path: two per
// byte; splice and sendfile: none) into a. The caller records the payload.
func (s *Sender) SetAccounting(a *Accounting) { s.acct = a }

// Stats returns a snapshot of the Sender's counters.
func (s *Sender) Stats() SendStats { return s.stats }

// Close releases the Sender's pipe and forgets the last source. It does not
// close the destination.
func (s *Sender) Close() error {
	s.src = srcCache{}
	return s.kernel.close()
}

// Write writes p to the destination (a plain write, counted on the copy
// path's crossings but not as a call). It makes the Sender an io.Writer, so
// that io.Copy(sender, src) takes ReadFrom's zero-copy paths.
func (s *Sender) Write(p []byte) (int, error) {
	n, err := s.dst.Write(p)
	s.acct.AddCrossing(int64(n))
	return n, err
}

// SendFile sends n bytes of f starting at offset off (f's file position is
// not used or moved) by sendfile(2), falling back to pread and write. It
// returns the number of bytes sent, and io.ErrUnexpectedEOF if f ends before
// off+n. f must stay open during the call.
func (s *Sender) SendFile(f *os.File, off, n int64) (int64, error) {
	if off < 0 || n < 0 {
		return 0, fmt.Errorf("%w: SendFile at %d of %d bytes", ErrRange, off, n)
	}
	done, refusal, err := s.sendfile(f, off, true, n)
	return s.finish(PathSendfile, true, done, n, refusal, err, func(rest int64) (int64, error) {
		return s.copyN(io.NewSectionReader(f, off+done, rest), rest)
	})
}

// Splice sends n bytes read from src (a socket, pipe or file, read from its
// current position) through a pipe by splice(2), falling back to a copy. It
// returns the number of bytes sent, and io.ErrUnexpectedEOF if src ends
// first. A src that does not implement syscall.Conn takes the copy path.
func (s *Sender) Splice(src io.Reader, n int64) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("%w: Splice of %d bytes", ErrRange, n)
	}
	done, refusal, err := s.splice(src, n)
	return s.finish(PathSplice, true, done, n, refusal, err, func(rest int64) (int64, error) {
		return s.copyN(src, rest)
	})
}

// ReadFrom sends everything src holds until io.EOF (io.Copy calls it):
// sendfile when src is a syscall.Conn over a regular file (such as an
// *os.File, read from and moving its file position), splice for another
// syscall.Conn (socket, pipe), the copy path otherwise.
// An *io.LimitedReader is looked through, as io.Copy's callers expect, and
// its N decreased by the bytes sent.
func (s *Sender) ReadFrom(src io.Reader) (int64, error) {
	limit := int64(-1)
	lr, limited := src.(*io.LimitedReader)
	if limited {
		src, limit = lr.R, lr.N
		if limit <= 0 {
			return 0, nil
		}
	}
	want := limit
	if want < 0 {
		want = 1<<63 - 1
	}
	var (
		done    int64
		refusal error
		err     error
		path    = PathCopy
		total   int64
	)
	if sc, ok := src.(syscall.Conn); !ok {
		refusal = errNotKernel
	} else if s.isRegularFile(sc) {
		path = PathSendfile
		done, refusal, err = s.sendfile(sc, 0, false, want)
	} else {
		path = PathSplice
		done, refusal, err = s.splice(src, want)
	}
	total, err = s.finish(path, false, done, want, refusal, err, func(rest int64) (int64, error) {
		return s.copyN(src, rest)
	})
	if limited {
		lr.N -= total
	}
	return total, err
}

// errNotKernel marks a source no kernel path can read (not a syscall.Conn):
// the copy path runs but it is not counted as a refusal.
var errNotKernel = errors.New("zerocopy: source has no file descriptor")

// finish accounts for a kernel attempt that moved done of want bytes, and
// runs the copy path for the rest when the kernel refused. When exact, fewer
// than want bytes is io.ErrUnexpectedEOF.
func (s *Sender) finish(path Path, exact bool, done, want int64, refusal, err error, rest func(int64) (int64, error)) (int64, error) {
	drained := s.kernel.drain // bytes a refused splice copied out of its pipe
	s.kernel.drain = 0
	s.stats.Copy.Bytes += drained
	switch path {
	case PathSplice:
		if done > drained || refusal == nil {
			s.stats.Splice.Calls++
		}
		s.stats.Splice.Bytes += done - drained
	case PathSendfile:
		if done > 0 || refusal == nil {
			s.stats.Sendfile.Calls++
		}
		s.stats.Sendfile.Bytes += done
	}
	s.stats.LastPath = path
	if refusal != nil {
		if refusal != errNotKernel {
			s.stats.Fallbacks++
			s.stats.LastRefusal = refusal
		}
		s.stats.LastPath = PathCopy
		s.stats.Copy.Calls++
		var n int64
		n, err = rest(want - done)
		s.stats.Copy.Bytes += n
		done += n
	}
	if exact && err == nil && done < want {
		err = io.ErrUnexpectedEOF
	}
	return done, err
}

// copyN copies up to n bytes from src to dst through the Sender's buffer,
// stopping at EOF without error.
func (s *Sender) copyN(src io.Reader, n int64) (int64, error) {
	if s.buf == nil {
		s.buf = make([]byte, 256<<10)
	}
	var total int64
	for total < n {
		p := s.buf
		if int64(len(p)) > n-total {
			p = p[:n-total]
		}
		k, rerr := src.Read(p)
		if k > 0 {
			s.acct.AddCrossing(int64(k))
			w, werr := s.dst.Write(p[:k])
			s.acct.AddCrossing(int64(w))
			total += int64(w)
			if werr != nil {
				return total, werr
			}
			if w != k {
				return total, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
	return total, nil
}
