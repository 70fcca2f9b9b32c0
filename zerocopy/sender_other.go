//go:build !linux

package zerocopy

import (
	"errors"
	"io"
	"syscall"
)

// errNoKernelPath is the refusal on systems without splice and sendfile
// support in this package: every call takes the copy path.
var errNoKernelPath = errors.New("zerocopy: splice and sendfile are implemented on Linux only")

type kernelState struct{ drain int64 }

func (k *kernelState) init(*Sender) {}
func (k *kernelState) close() error { return nil }

func (s *Sender) sendfile(syscall.Conn, int64, bool, int64) (int64, error, error) {
	return 0, errNoKernelPath, nil
}

func (s *Sender) splice(io.Reader, int64) (int64, error, error) {
	return 0, errNoKernelPath, nil
}

func (s *Sender) isRegularFile(syscall.Conn) bool { return false }
