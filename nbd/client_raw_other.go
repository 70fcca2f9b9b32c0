//go:build !linux

package nbd

import (
	"syscall"
	"unsafe"
)

// Elsewhere the client reads the first piece only; the rest comes with
// the next read.
func clientRawReadv(fd uintptr, iov *[2]syscall.Iovec) (int, error) {
	p := unsafe.Slice(iov[0].Base, iov[0].Len)
	return syscall.Read(int(fd), p)
}
