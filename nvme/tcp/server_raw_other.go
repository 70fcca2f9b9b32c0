//go:build !linux

package tcp

import "syscall"

// rawRead is read(2) on the non-blocking descriptor of a socket (see
// server_raw_linux.go for the raw call Linux makes instead).
func rawRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }
