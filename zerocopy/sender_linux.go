//go:build linux

package zerocopy

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The system calls, as variables so that a test can make the kernel refuse
// (ENOSYS) without a seccomp filter. unix.Splice returns int64 on amd64 and
// int on some 32-bit architectures; the wrapper takes both.
var (
	spliceSys = func(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error) {
		k, err := unix.Splice(rfd, roff, wfd, woff, n, flags)
		return int64(k), err
	}
	sendfileSys = unix.Sendfile
)

const (
	pipeWant        = 1 << 20 // pipe capacity asked for (fs.pipe-max-size is 1 MiB by default)
	maxSendfileSize = 4 << 20 // bytes per sendfile call, as Go's own net package does
	spliceFlags     = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
)

// kernelState is the Linux part of a Sender: its pipe and the callbacks
// handed to RawConn.Read/Write, made once so that a call allocates nothing
// per chunk.
type kernelState struct {
	s       *Sender
	pr, pw  int // pipe ends, -1 when closed
	pipeCap int

	srcFd  int   // sendfile source
	offVal int64 // sendfile offset, used when useOff
	useOff bool  // false: sendfile reads from the file position
	n      int   // bytes asked of the current system call
	moved  int64 // bytes it moved
	err    error // its error
	drain  int64 // bytes the last splice moved by copying out of the pipe

	stat unix.Stat_t // isRegularFile's

	fillFn, pumpFn, sendfileFn func(uintptr) bool
	grabFn, statFn             func(uintptr)
}

func (k *kernelState) init(s *Sender) {
	k.s, k.pr, k.pw = s, -1, -1
	k.fillFn, k.pumpFn, k.sendfileFn, k.grabFn, k.statFn = k.fill, k.pump, k.sendfileCall, k.grab, k.fstat
}

func (k *kernelState) close() error {
	if k.pr < 0 {
		return nil
	}
	err1 := unix.Close(k.pr)
	err2 := unix.Close(k.pw)
	k.pr, k.pw = -1, -1
	if err1 != nil {
		return err1
	}
	return err2
}

func (k *kernelState) openPipe() error {
	if k.pr >= 0 {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("zerocopy: pipe2: %w", err)
	}
	k.pr, k.pw = p[0], p[1]
	unix.FcntlInt(uintptr(k.pw), unix.F_SETPIPE_SZ, pipeWant) // best effort
	c, err := unix.FcntlInt(uintptr(k.pw), unix.F_GETPIPE_SZ, 0)
	if err != nil || c <= 0 {
		c = 64 << 10
	}
	k.pipeCap = c
	return nil
}

// isRefusal reports an errno by which the kernel declines a zero-copy path
// for these descriptors, as opposed to an I/O error.
func isRefusal(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ESPIPE)
}

func (k *kernelState) grab(fd uintptr) { k.srcFd = int(fd) }

// sendfileCall runs on the destination's RawConn.Write; false means "wait
// until writable".
func (k *kernelState) sendfileCall(fd uintptr) bool {
	for {
		var off *int64
		if k.useOff {
			off = &k.offVal
		}
		n, err := sendfileSys(int(fd), k.srcFd, off, k.n)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		k.moved, k.err = int64(max(n, 0)), err
		return true
	}
}

// fill runs on the source's RawConn.Read: source -> pipe.
func (k *kernelState) fill(fd uintptr) bool {
	for {
		n, err := spliceSys(int(fd), nil, k.pw, nil, k.n, spliceFlags)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		k.moved, k.err = max(n, 0), err
		return true
	}
}

// pump runs on the destination's RawConn.Write: pipe -> destination.
func (k *kernelState) pump(fd uintptr) bool {
	for {
		n, err := spliceSys(k.pr, nil, int(fd), nil, k.n, spliceFlags)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		k.moved, k.err = max(n, 0), err
		return true
	}
}

// sendfile moves up to n bytes of f by sendfile(2), from offset off when
// useOff, else from the file position. It stops early at EOF, on a refusal
// (returned as refusal, for the copy path to take over) or an error.
func (s *Sender) sendfile(f syscall.Conn, off int64, useOff bool, n int64) (done int64, refusal, err error) {
	k := &s.kernel
	k.drain = 0
	if s.rc == nil {
		return 0, s.rcErr, nil
	}
	src, err := s.srcRawConn(f)
	if err != nil {
		return 0, err, nil
	}
	if err := src.Control(k.grabFn); err != nil {
		return 0, err, nil
	}
	defer runtime.KeepAlive(f)
	k.offVal, k.useOff = off, useOff
	for done < n {
		k.n, k.err = int(min(n-done, maxSendfileSize)), nil
		if err := s.rc.Write(k.sendfileFn); err != nil {
			return done, nil, fmt.Errorf("zerocopy: sendfile: %w", err)
		}
		done += k.moved
		if k.err != nil {
			if isRefusal(k.err) {
				return done, fmt.Errorf("sendfile: %w", k.err), nil
			}
			return done, nil, fmt.Errorf("zerocopy: sendfile: %w", k.err)
		}
		if k.moved == 0 {
			break // end of file
		}
	}
	return done, nil, nil
}

// splice moves up to n bytes from src to the destination through the pipe.
// It stops early at EOF, on a refusal (returned for the copy path to take
// over; bytes already in the pipe are first copied out to the destination
// and counted in k.drain) or on an error.
func (s *Sender) splice(src io.Reader, n int64) (done int64, refusal, err error) {
	k := &s.kernel
	k.drain = 0
	if s.rc == nil {
		return 0, s.rcErr, nil
	}
	sc, ok := src.(syscall.Conn)
	if !ok {
		return 0, errNotKernel, nil
	}
	srcRC, err := s.srcRawConn(sc)
	if err != nil {
		return 0, err, nil
	}
	if err := k.openPipe(); err != nil {
		return 0, err, nil
	}
	for done < n {
		k.n, k.err = int(min(n-done, int64(k.pipeCap))), nil
		if err := srcRC.Read(k.fillFn); err != nil {
			return done, nil, fmt.Errorf("zerocopy: splice from source: %w", err)
		}
		if k.err != nil {
			if isRefusal(k.err) {
				return done, fmt.Errorf("splice from source: %w", k.err), nil
			}
			return done, nil, fmt.Errorf("zerocopy: splice from source: %w", k.err)
		}
		if k.moved == 0 {
			break // end of stream
		}
		inPipe := k.moved
		for inPipe > 0 {
			k.n, k.err = int(inPipe), nil
			werr := s.rc.Write(k.pumpFn)
			if werr == nil && k.err == nil && k.moved == 0 {
				werr = io.ErrShortWrite // the kernel took nothing and said nothing: do not spin
			}
			if werr == nil && k.err == nil {
				inPipe -= k.moved
				done += k.moved
				continue
			}
			if werr == nil && isRefusal(k.err) {
				refusal := fmt.Errorf("splice to destination: %w", k.err)
				w, err := s.drainPipe(inPipe)
				k.drain = w
				done += w
				return done, refusal, err
			}
			k.close() // the pipe may hold bytes that must not go out with the next call
			if werr == nil {
				werr = k.err
			}
			return done, nil, fmt.Errorf("zerocopy: splice to destination: %w", werr)
		}
	}
	return done, nil, nil
}

// drainPipe copies the n bytes left in the pipe to the destination.
func (s *Sender) drainPipe(n int64) (int64, error) {
	k := &s.kernel
	if s.buf == nil {
		s.buf = make([]byte, 256<<10)
	}
	var total int64
	for total < n {
		p := s.buf[:min(int64(len(s.buf)), n-total)]
		r, err := unix.Read(k.pr, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil || r <= 0 {
			k.close()
			return total, fmt.Errorf("zerocopy: draining the splice pipe: %v", errOr(err, io.ErrUnexpectedEOF))
		}
		s.acct.AddCrossing(int64(r))
		w, err := s.dst.Write(p[:r])
		s.acct.AddCrossing(int64(w))
		total += int64(w)
		if err != nil {
			k.close()
			return total, err
		}
	}
	return total, nil
}

func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// isRegularFile reports whether the descriptor behind c is a regular file,
// the source sendfile(2) takes (also when the *os.File is wrapped, as
// os.File.WriteTo does when it hands itself to io.Copy).
func (s *Sender) isRegularFile(c syscall.Conn) bool {
	if c == s.src.conn && s.src.regular != 0 {
		return s.src.regular > 0
	}
	rc, err := s.srcRawConn(c)
	if err != nil {
		return false
	}
	k := &s.kernel
	k.err = nil
	if err := rc.Control(k.statFn); err != nil || k.err != nil {
		return false
	}
	regular := k.stat.Mode&unix.S_IFMT == unix.S_IFREG
	if c == s.src.conn {
		s.src.regular = -1
		if regular {
			s.src.regular = 1
		}
	}
	return regular
}

func (k *kernelState) fstat(fd uintptr) { k.err = unix.Fstat(int(fd), &k.stat) }
