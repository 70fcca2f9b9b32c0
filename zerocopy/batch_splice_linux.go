//go:build linux

package zerocopy

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Batch with SetSplice moves a large batch into its socket without
// copying it: vmsplice(2) puts references to the pages of the batch's
// buffers into a pipe, and splice(2) moves them from the pipe into the
// socket, whose buffers then point at those pages until the receiver has
// consumed them. writev(2) instead copies every byte into freshly
// allocated kernel pages, which the receiver's read then frees: for 64 KiB
// pieces that copy and those pages are most of both sides' work
// (BenchmarkBatchSplice, and nbd's client through
// examples/nbdbench -splice).

// spliceState is a rawWriter's pipe and the progress of its current batch.
type spliceState struct {
	min    int   // batches of at least min bytes are spliced; 0: never
	pr, pw int   // the pipe's ends, -1 while closed
	inPipe int   // bytes of the current batch in the pipe
	moved  int64 // bytes ever spliced into the destination
	off    bool  // the kernel refused: write with writev from now on
	try    func(fd uintptr) bool
	closer runtime.Cleanup // closes the pipe if the writer goes first
}

// spliceSndbuf is the send buffer setSplice asks a socket for. With the
// default one (net.core.wmem_default) a spliced writer of 64 KiB pieces
// at depth 8 parks on a full socket and is woken far more often than a
// copying one, and loses to it; with 1 MiB it wins, while a copying
// writer gains nothing from the larger buffer (BenchmarkClientWriteSpliced
// with a dialer setting SO_SNDBUF, docs/bench/2026-12-01-late.md). The
// kernel caps what it grants at twice net.core.wmem_max.
const spliceSndbuf = 1 << 20

// setSplice sets the threshold; 0 turns splicing off and closes the pipe.
func (w *rawWriter) setSplice(min int) {
	w.sp.min = max(min, 0)
	if w.sp.try == nil {
		w.sp.pr, w.sp.pw = -1, -1
		w.sp.try = w.spliceStep
	}
	if w.sp.min == 0 {
		w.closePipe()
		return
	}
	w.rc.Control(func(fd uintptr) {
		// Best effort: not a socket (ENOTSOCK), or already larger.
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF); err == nil && n < spliceSndbuf {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, spliceSndbuf)
		}
	})
}

func (w *rawWriter) closePipe() {
	if w.sp.pr >= 0 {
		w.sp.closer.Stop()
		unix.Close(w.sp.pr)
		unix.Close(w.sp.pw)
		w.sp.pr, w.sp.pw = -1, -1
	}
	w.sp.inPipe = 0
}

func (w *rawWriter) openPipe() error {
	if w.sp.pr >= 0 {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return err
	}
	w.sp.pr, w.sp.pw = p[0], p[1]
	unix.FcntlInt(uintptr(w.sp.pw), unix.F_SETPIPE_SZ, pipeWant) // best effort
	// The pipe's descriptors go when the writer does, if setSplice(0)
	// did not close them first.
	w.sp.closer = runtime.AddCleanup(w, func(p [2]int) { unix.Close(p[0]); unix.Close(p[1]) }, p)
	return nil
}

// splices reports whether a batch of n bytes goes through the pipe.
func (w *rawWriter) splices(n int) bool {
	return w.sp.min > 0 && n >= w.sp.min && !w.sp.off
}

// splicev writes bufs whole through the pipe, or fails; it falls back to
// writev if the kernel refuses before any byte reached the destination.
func (w *rawWriter) splicev(bufs [][]byte) (n int64, spliced bool, err error) {
	if err := w.openPipe(); err != nil {
		w.sp.off = true
		n, err := w.writev(bufs)
		return n, false, err
	}
	all := w.fill(bufs)
	err = w.rc.Write(w.sp.try)
	w.drop(all)
	if err == nil {
		err = w.err
	}
	if err != nil && w.n == 0 && isRefusal(err) {
		// Nothing reached the destination: drop what the pipe holds
		// and write the whole batch the usual way, from now on too.
		w.closePipe()
		w.sp.off = true
		n, err := w.writev(bufs)
		return n, false, err
	}
	if err != nil && w.sp.inPipe > 0 {
		w.closePipe() // the rest of the batch must not go out later
	}
	w.sp.moved += w.n
	return w.n, true, err
}

// spliceStep runs on the destination's RawConn.Write: it fills the pipe
// from w.iov and empties it into fd until the batch is out, and asks to
// wait when the destination is full.
func (w *rawWriter) spliceStep(fd uintptr) bool {
	for len(w.iov) > 0 || w.sp.inPipe > 0 {
		if len(w.iov) > 0 {
			k, _, e := syscall.RawSyscall6(unix.SYS_VMSPLICE, uintptr(w.sp.pw), uintptr(unsafe.Pointer(&w.iov[0])), uintptr(min(len(w.iov), iovMax)), unix.SPLICE_F_NONBLOCK, 0, 0)
			switch e {
			case 0:
				w.sp.inPipe += int(k)
				w.advance(uint64(k))
			case syscall.EINTR:
				continue
			case syscall.EAGAIN: // the pipe is full
				if w.sp.inPipe == 0 {
					w.err = e
					return true
				}
			default:
				w.err = e
				return true
			}
		}
		k, _, e := syscall.RawSyscall6(unix.SYS_SPLICE, uintptr(w.sp.pr), 0, fd, 0, uintptr(w.sp.inPipe), spliceFlags)
		switch e {
		case 0:
			if k == 0 {
				w.err = syscall.EPIPE
				return true
			}
			w.sp.inPipe -= int(k)
			w.n += int64(k)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // park until writable
		default:
			w.err = e
			return true
		}
	}
	return true
}

func (w *rawWriter) splicedBytes() int64 { return w.sp.moved }
