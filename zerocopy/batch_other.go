//go:build !linux

package zerocopy

import "syscall"

// Elsewhere a Batch on a socket writes through net.Buffers (writev where
// the system has it); see batch_linux.go for what Linux does instead.

type rawWriter struct{}

func newRawWriter(rc syscall.RawConn) *rawWriter { return nil }

func (w *rawWriter) writev(bufs [][]byte) (int64, error) { panic("unreachable") }

func (w *rawWriter) setSplice(min int) {}

func (w *rawWriter) splices(n int) bool { return false }

func (w *rawWriter) splicev(bufs [][]byte) (int64, bool, error) { panic("unreachable") }

func (w *rawWriter) splicedBytes() int64 { return 0 }
