//go:build !linux

package nbd

import (
	"syscall"
	"unsafe"
)

// Elsewhere socket reads go through the runtime's system calls (see
// sock_raw_linux.go for why Linux does not).

func sockRawRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }

func sockRawPeek(fd uintptr, p []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}

// Elsewhere the client reads the first piece only; the rest comes with
// the next read.
func sockRawReadv(fd uintptr, iov []syscall.Iovec) (int, error) {
	p := unsafe.Slice(iov[0].Base, iov[0].Len)
	return syscall.Read(int(fd), p)
}
