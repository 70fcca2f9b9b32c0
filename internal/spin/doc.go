// Package spin is the module's one way for a goroutine to wait for another
// on a hot path: spin a little, then park on a channel.
//
// A side that must wait for the other (a FIFO's producer for room, the DMA
// engine's worker for the next transfer) first re-checks the shared state a
// bounded number of times (Checks), then yields the processor between
// re-checks until a spin duration has passed, reading the clock once per
// YieldsPerClock yields, and only then parks. The other side wakes it only
// when it is parked, so two busy goroutines hand work over with atomic
// operations alone and never pay a goroutine wake-up.
//
// Pacer paces the spin; Gate parks one waiter until a counter reaches a
// value; Event is a counter one goroutine posts and another awaits, built
// from the two. Publish stores a counter without the full fence of
// sync/atomic's Store where the platform allows (linux/amd64, with
// membarrier(2)), for a waiter that parks on a gate of NewPublishGate; the
// fence the publisher skips, that waiter makes up for when it parks long
// (publish.go). PrefetchWrite takes a cache line for writing ahead of the
// write (PREFETCHW on amd64, where the processor has it), for a ring's
// producer about to reuse a slot its consumer read (prefetch.go). The spin
// durations the packages default to (fifo.DefaultSpin, dma.DefaultSpin, the
// pipeline ring's yield round) are defined here too, so the trade-off is
// written in one place.
//
// The cost of each choice is measured by BenchmarkHandoff in package fifo,
// BenchmarkTransfer and BenchmarkSpin in package dma, and the pipeline
// package's ring benchmarks.
package spin
