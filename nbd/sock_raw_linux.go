package nbd

import (
	"syscall"
	"unsafe"
)

// The server's socket reads on Linux: read(2) on the non-blocking
// descriptor, through its RawConn (the network poller still parks the
// goroutine when the socket is empty), but as raw system calls, without
// the runtime's entersyscall/exitsyscall. Its replies are written the
// same way, by zerocopy.Batch.
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

// sockRawPeek is recv(2) with MSG_PEEK on a non-blocking descriptor,
// raw: it reports whether bytes wait (n > 0), the peer has closed (n ==
// 0, no error) or nothing waits (EAGAIN), without consuming any.
func sockRawPeek(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sockRawRead is read(2) on a non-blocking descriptor, raw.
func sockRawRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sockRawReadv is readv(2) on a non-blocking descriptor, raw (a payload
// and the next header with it).
func sockRawReadv(fd uintptr, iov []syscall.Iovec) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
