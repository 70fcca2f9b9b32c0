//go:build !linux || !amd64 || race

package spin

import "sync/atomic"

func registerBarrier() bool { return false }

func heavyBarrier() bool { return false }

func storeRelease(a *atomic.Uint64, v uint64) { a.Store(v) }
