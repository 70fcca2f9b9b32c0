package spin

import (
	"sync"
	"sync/atomic"
	"time"
)

// Publishing a counter with a plain store.
//
// A counter that one side advances and the other waits for (a FIFO's tail
// and head) is published once per hand-off. sync/atomic's Store is a
// sequentially consistent store: on amd64 an XCHG, which waits until every
// earlier store of the thread has reached the cache. When the two sides run
// on different cores, those earlier stores are the hand-off's own (the data
// just written, the counter the other side just read), each waiting for its
// cache line to come back from the other core, so the publisher stalls for
// a cross-core round trip or two per hand-off. A release store, which
// amd64's plain MOV is, lets them drain in the background.
//
// What the XCHG also gave is that the publisher's next load (Gate.Wake's
// look at the waiter's announcement) cannot pass the store. Without it, a
// waiter that announces itself and then re-checks the counter can miss the
// store still in the publisher's store buffer while the publisher misses
// the announcement (the store-buffering case of x86-TSO, which
// TestPublishGateLitmus shows happening), and would sleep through the
// hand-off. So a gate made by NewPublishGate parks in two parts: it waits
// for the Wake's token for up to FenceAfter; if none came, it runs
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running
// thread of the process pass a full memory barrier, re-checks the counter,
// and only then waits for good. After the barrier either the re-check sees
// the store or the publisher's later look sees the announcement. A
// wake-up lost that way costs at most FenceAfter; a park that ends sooner,
// as in a stream, costs no system call. Where membarrier is missing
// (another OS or architecture, an old kernel, a seccomp filter) or under
// the race detector, Publish is sync/atomic's Store and the gates are
// plain ones.

// FenceAfter is how long a waiter on a gate of NewPublishGate waits for
// its wake-up before it fences the publisher and re-checks: long against a
// hand-off in a stream, short against a wait for a device or a network.
const FenceAfter = 200 * time.Microsecond

var (
	registerOnce sync.Once
	asymmetric   bool // Publish is a plain store and publish gates park in two parts
)

// enableAsymmetric registers the process for membarrier's private
// expedited command, once; it reports whether Publish is a plain store.
func enableAsymmetric() bool {
	registerOnce.Do(func() { asymmetric = registerBarrier() })
	return asymmetric
}

// Asymmetric reports whether Publish stores with a release store and the
// gates of NewPublishGate park in two parts (see the comment above). It
// registers the process for membarrier on its first call.
func Asymmetric() bool { return enableAsymmetric() }

// Publish stores v in a, a counter whose waiter parks on a Gate made by
// NewPublishGate, and calls nothing else. Only the goroutine that advances
// the counter calls it; readers use a.Load. Everything the caller wrote
// before Publish is visible to a goroutine whose Load sees v.
func Publish(a *atomic.Uint64, v uint64) {
	if asymmetric {
		storeRelease(a, v)
		return
	}
	a.Store(v)
}

// NewPublishGate returns a Gate for a counter stored with Publish. It
// registers the process for membarrier on first use, so make it before
// the counter is published.
func NewPublishGate() Gate {
	var fence *time.Timer
	if enableAsymmetric() {
		fence = time.NewTimer(time.Hour)
		fence.Stop()
	}
	return Gate{ch: make(chan struct{}, 1), fence: fence}
}
