//go:build !linux

package zerocopy

import "syscall"

// Elsewhere a Batch on a socket writes through net.Buffers (writev where
// the system has it); see batch_linux.go for what Linux does instead.

type rawWriter struct{}

func newRawWriter(rc syscall.RawConn) *rawWriter { return nil }

func (w *rawWriter) writev(bufs [][]byte) (int64, error) { panic("unreachable") }
