//go:build linux && amd64 && !race

package spin

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// membarrier(2) commands, from linux/membarrier.h.
const (
	membarrierPrivateExpedited         = 1 << 3
	membarrierRegisterPrivateExpedited = 1 << 4
)

// storeRelease stores v in *a with a plain MOV, a release store on amd64
// (publish_amd64.s).
//
//go:noescape
func storeRelease(a *atomic.Uint64, v uint64)

// registerBarrier registers the process for private expedited
// membarriers and reports whether it may use them.
func registerBarrier() bool {
	_, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterPrivateExpedited, 0, 0)
	return e == 0 && heavyBarrier()
}

// heavyBarrier makes every running thread of the process pass a full
// memory barrier before it returns; it reports whether it did.
func heavyBarrier() bool {
	_, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierPrivateExpedited, 0, 0)
	return e == 0
}
