//go:build !linux

package tcp

import "syscall"

// rawRead is read(2) on the non-blocking descriptor of a socket (see
// server_raw_linux.go for the raw call Linux makes instead).
func rawRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }

// rawReadvPieces reads into the first piece that has room (see
// server_raw_linux.go for the readv Linux makes instead).
func rawReadvPieces(fd uintptr, pieces [][]byte) (int, error) {
	for _, p := range pieces {
		if len(p) > 0 {
			return rawRead(fd, p)
		}
	}
	return 0, nil
}
