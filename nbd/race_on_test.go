//go:build race

package nbd

// raceEnabled reports a build with the race detector, whose shadow memory
// multiplies the resident size of a test.
const raceEnabled = true
