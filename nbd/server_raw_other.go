//go:build !linux

package nbd

import "syscall"

// Elsewhere the server's socket reads go through the runtime's system
// calls (see server_raw_linux.go for why Linux does not).

func serverRawRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }

func serverRawPeek(fd uintptr, p []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), p, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return n, err
}
