package nbd

import (
	"syscall"
	"unsafe"
)

// The server's socket I/O on Linux: read(2) and writev(2) on the
// non-blocking descriptor, through its RawConn (the network poller still
// parks the goroutine when the socket is empty or full), but as raw
// system calls, without the runtime's entersyscall/exitsyscall.
//
// Why: when every P of the process has gone idle (the server waiting for
// its client), the runtime's sysmon thread sleeps until a goroutine next
// enters a system call, which wakes it (a futex call), and then polls
// every 20 us for a millisecond or more. A server that waits for its
// client thousands of times a second paid that on every wake-up, in
// context switches, futex calls and sysmon's CPU time (fio 64 KiB writes at
// depth 8 through examples/nbd-server/fio-compare.sh shows it, with perf
// stat for the counts; BenchmarkServerWrite64KQD8 runs the same path in
// process). A non-blocking read or writev never blocks, so holding the P
// through one costs nothing.
//
// The price: once sysmon has found every P idle it stays asleep while the
// server runs, until the next timer, GC or any other goroutine's ordinary
// system call, so meanwhile it does not preempt a goroutine that runs
// for over 10 ms (the server's own never do) nor retake a P from a
// blocking call (raw calls do not release theirs; ordinary ones wake it).

// serverRawRead is read(2) on a non-blocking descriptor, raw.
func serverRawRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// serverRawWriter writes whole replies to a socket with raw writev(2)
// calls through its RawConn, waiting on the poller while the socket is
// full. It is used under the reply writer's pen, by one goroutine at once.
type serverRawWriter struct {
	rc  syscall.RawConn
	iov []syscall.Iovec // what is left to write
	err error
	try func(fd uintptr) bool // w.write, bound once
}

// newServerRawWriter returns a writer for rc with room for n pieces.
func newServerRawWriter(rc syscall.RawConn, n int) *serverRawWriter {
	w := &serverRawWriter{rc: rc, iov: make([]syscall.Iovec, 0, n)}
	w.try = w.write
	return w
}

// serverIovMax is Linux's IOV_MAX: a writev of more pieces fails.
const serverIovMax = 1024

func (w *serverRawWriter) write(fd uintptr) bool {
	for len(w.iov) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(min(len(w.iov), serverIovMax)))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until writable
		default:
			w.err = e
			return true
		}
		w.advance(uint64(n))
	}
	return true
}

// advance drops the first n bytes written from w.iov.
func (w *serverRawWriter) advance(n uint64) {
	for n > 0 {
		v := &w.iov[0]
		if n >= v.Len {
			n -= v.Len
			w.iov = w.iov[1:]
			continue
		}
		v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), n))
		v.Len -= n
		return
	}
}

// writev writes bufs whole, or fails: the connection is then unusable.
func (w *serverRawWriter) writev(bufs [][]byte) error {
	all := w.iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			all = append(all, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
		}
	}
	w.iov, w.err = all, nil
	err := w.rc.Write(w.try)
	clear(all) // keep no buffer alive
	w.iov = all[:0]
	if err == nil {
		err = w.err
	}
	return err
}
