package tcp

import (
	"syscall"
	"unsafe"
)

// rawRead is read(2) on the non-blocking descriptor of a socket, as a raw
// system call: it never blocks, so it need not hand its P back to the
// runtime, and it does not wake the runtime's sysmon thread, which a
// server that waits for its host thousands of times a second would
// otherwise pay on every wake-up (nbd/sock_raw_linux.go says more).
func rawRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawReadvPieces is readv(2) into pieces (at most maxReadPieces of them),
// as rawRead.
func rawReadvPieces(fd uintptr, pieces [][]byte) (int, error) {
	var iov [maxReadPieces]syscall.Iovec
	k := 0
	for _, p := range pieces[:min(len(pieces), maxReadPieces)] {
		if len(p) > 0 {
			iov[k].Base = &p[0]
			iov[k].SetLen(len(p))
			k++
		}
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
