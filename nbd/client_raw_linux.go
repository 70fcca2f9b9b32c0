package nbd

import (
	"syscall"
	"unsafe"
)

// clientRawReadv is readv(2) of two pieces on a non-blocking descriptor,
// raw (see client_raw.go).
func clientRawReadv(fd uintptr, iov *[2]syscall.Iovec) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&iov[0])), 2)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
