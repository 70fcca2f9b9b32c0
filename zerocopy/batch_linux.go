package zerocopy

import (
	"syscall"
	"unsafe"
)

// A Batch on a socket writes with raw writev(2) on the non-blocking
// descriptor, through its RawConn, without the runtime's
// entersyscall/exitsyscall.
//
// Why: when every P of the process has gone idle (a server waiting for its
// client), the runtime's sysmon thread sleeps until a goroutine next
// enters a system call, which wakes it (a futex call), and then polls
// every 20 us for a millisecond or more. A server that waits for its
// client thousands of times a second pays that on every wake-up, in
// context switches, futex calls and sysmon's CPU time (package nbd's
// BenchmarkServerWrite64KQD8, and fio through
// examples/nbd-server/fio-compare.sh with perf stat, show it). A
// non-blocking writev never blocks, so holding the P through one costs
// nothing. The price: once sysmon has found every P idle it stays asleep
// until the next timer, GC or ordinary system call, so meanwhile it does
// not preempt a goroutine that runs for over 10 ms.

// rawWriter writes iovecs with raw writev(2) calls through a RawConn,
// waiting on the poller while the socket is full.
type rawWriter struct {
	rc  syscall.RawConn
	iov []syscall.Iovec // what is left to write
	n   int64
	err error
	try func(fd uintptr) bool // w.write, bound once
	sp  spliceState           // SetSplice's (batch_splice_linux.go)
}

func newRawWriter(rc syscall.RawConn) *rawWriter {
	w := &rawWriter{rc: rc}
	w.try = w.write
	return w
}

// iovMax is Linux's IOV_MAX: a writev of more pieces fails.
const iovMax = 1024

func (w *rawWriter) write(fd uintptr) bool {
	for len(w.iov) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(min(len(w.iov), iovMax)))
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
		w.n += int64(n)
		w.advance(uint64(n))
	}
	return true
}

// advance drops the first n bytes written from w.iov.
func (w *rawWriter) advance(n uint64) {
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
func (w *rawWriter) writev(bufs [][]byte) (int64, error) {
	all := w.fill(bufs)
	err := w.rc.Write(w.try)
	w.drop(all)
	if err == nil {
		err = w.err
	}
	return w.n, err
}

// fill sets w.iov to bufs' pieces (which the writing consumes from the
// front) and the counters to zero, and returns the whole list for drop.
func (w *rawWriter) fill(bufs [][]byte) []syscall.Iovec {
	all := w.iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			all = append(all, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
		}
	}
	w.iov, w.n, w.err = all, 0, nil
	return all
}

// drop forgets the list fill returned, keeping no buffer alive and its
// array for the next batch.
func (w *rawWriter) drop(all []syscall.Iovec) {
	clear(all)
	w.iov = all[:0]
}
