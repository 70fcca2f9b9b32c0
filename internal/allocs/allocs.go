package allocs

import "runtime"

// Slack is the most allocations per call a test of a path said to
// allocate nothing accepts.
const Slack = 0.01

// PerRun calls f runs times to reach the steady state (every slot of a
// queue taken once, every buffer grown to its size), then runs times more,
// with GOMAXPROCS at 1 as testing.AllocsPerRun does, and returns the heap
// allocations made meanwhile (by every goroutine) per call, unrounded.
func PerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range runs {
		f()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}
