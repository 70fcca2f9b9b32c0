package tcp

import (
	"syscall"
	"unsafe"
)

// rawRead is read(2) on the non-blocking descriptor of a socket, as a raw
// system call: it never blocks, so it need not hand its P back to the
// runtime, and it does not wake the runtime's sysmon thread, which a
// server that waits for its host thousands of times a second would
// otherwise pay on every wake-up (nbd/sock_raw_linux.go says more).
func rawRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
