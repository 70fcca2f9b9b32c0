// Package allocs counts the heap allocations of a steady-state call for
// nhd's tests, without rounding them away.
//
// testing.AllocsPerRun divides the count by the runs in integers: 99
// allocations in 100 runs read as 0, so a path that allocates every other
// call (a slice that grows, a buffer taken from a pool that is empty now
// and then) passes a test that asks for 0. PerRun returns the exact mean,
// and a test of a path said to allocate nothing accepts at most Slack per
// call: one allocation in a hundred calls, what the runtime may make on
// its own now and then without a call of ours paying for it.
package allocs
