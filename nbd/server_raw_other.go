//go:build !linux

package nbd

import "syscall"

// Elsewhere the server's socket I/O goes through the runtime's system
// calls (see server_raw_linux.go for why Linux does not).

func serverRawRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }

// serverRawWriter is never made: replies go through net.Buffers.
type serverRawWriter struct{}

func newServerRawWriter(rc syscall.RawConn, n int) *serverRawWriter { return nil }

func (w *serverRawWriter) writev(bufs [][]byte) error { panic("unreachable") }
