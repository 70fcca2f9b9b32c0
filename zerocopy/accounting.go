package zerocopy

import (
	"fmt"
	"sync/atomic"
)

// Accounting counts, for one data path, how many payload bytes entered it and
// how many times bytes were moved on the way, so that a path can report its
// copies per byte before and after an optimisation.
//
// Two kinds of movement are counted separately:
//
//   - a copy is a memmove done by user-space code (flattening a message,
//     copying a payload into a frame): AddCopy;
//   - a crossing is a transfer between kernel and user memory done by a
//     system call (read into a user buffer, write or writev from one):
//     AddCrossing. splice and sendfile move bytes without a crossing.
//
// The path's source calls AddPayload once per payload byte; each stage adds
// what it moves. All methods are safe for concurrent use, and all are no-ops
// on a nil *Accounting, so stages may call them unconditionally.
type Accounting struct {
	payload   atomic.Int64
	copied    atomic.Int64
	crossings atomic.Int64
}

// CopyStats is a snapshot of an Accounting.
type CopyStats struct {
	Payload   int64 // payload bytes that entered the path
	Copied    int64 // bytes copied by user-space code
	Crossings int64 // bytes moved between kernel and user memory by system calls
}

// AddPayload records n payload bytes entering the path.
func (a *Accounting) AddPayload(n int64) {
	if a != nil {
		a.payload.Add(n)
	}
}

// AddCopy records n bytes copied by user-space code.
func (a *Accounting) AddCopy(n int64) {
	if a != nil {
		a.copied.Add(n)
	}
}

// AddCrossing records n bytes moved between kernel and user memory.
func (a *Accounting) AddCrossing(n int64) {
	if a != nil {
		a.crossings.Add(n)
	}
}

// Reset sets every counter to zero.
func (a *Accounting) Reset() {
	if a != nil {
		a.payload.Store(0)
		a.copied.Store(0)
		a.crossings.Store(0)
	}
}

// Snapshot returns the counters (zero for a nil *Accounting).
func (a *Accounting) Snapshot() CopyStats {
	if a == nil {
		return CopyStats{}
	}
	return CopyStats{Payload: a.payload.Load(), Copied: a.copied.Load(), Crossings: a.crossings.Load()}
}

// CopiesPerByte returns Copied / Payload: how many times each payload byte
// was copied in user space (0 when no payload was recorded).
func (s CopyStats) CopiesPerByte() float64 {
	if s.Payload == 0 {
		return 0
	}
	return float64(s.Copied) / float64(s.Payload)
}

// CrossingsPerByte returns Crossings / Payload.
func (s CopyStats) CrossingsPerByte() float64 {
	if s.Payload == 0 {
		return 0
	}
	return float64(s.Crossings) / float64(s.Payload)
}

// String formats the snapshot as "65536 payload bytes: 1.00 copies/byte, 2.00 crossings/byte".
func (s CopyStats) String() string {
	return fmt.Sprintf("%d payload bytes: %.2f copies/byte, %.2f crossings/byte", s.Payload, s.CopiesPerByte(), s.CrossingsPerByte())
}
