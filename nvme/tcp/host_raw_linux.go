package tcp

import (
	"syscall"
	"unsafe"
)

// rawReadv is readv(2) into p and then q on the non-blocking descriptor
// of a socket, as a raw system call (see rawRead).
func rawReadv(fd uintptr, p, q []byte) (int, error) {
	var iov [2]syscall.Iovec
	iov[0].Base = &p[0]
	iov[0].SetLen(len(p))
	iov[1].Base = &q[0]
	iov[1].SetLen(len(q))
	n, _, e := syscall.RawSyscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), 2)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
