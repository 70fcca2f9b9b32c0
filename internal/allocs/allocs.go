package allocs

import (
	"math"
	"runtime"
)

// Slack is the most allocations per call a test of a path said to
// allocate nothing accepts.
const Slack = 0.01

// PerRun calls f runs times to reach the steady state (every slot of a
// queue taken once, every buffer grown to its size), then counts the heap
// allocations made (by every goroutine) over runs calls more, with
// GOMAXPROCS at 1 as testing.AllocsPerRun does, and returns them per
// call, unrounded. Since every goroutine counts, a count above Slack is
// taken again, up to tries times in all, and the lowest returned: what a
// goroutine left over from an earlier test allocates while it winds down
// falls on one count, what the calls allocate on every one.
func PerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for range runs {
		f()
	}
	best := math.Inf(1)
	for range tries {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		best = min(best, float64(after.Mallocs-before.Mallocs)/float64(runs))
		if best <= Slack {
			break
		}
	}
	return best
}

// tries is how many times PerRun counts at most.
const tries = 3
