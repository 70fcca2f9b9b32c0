package nbd

import (
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
)

// serverRSS returns the resident set size of this process from
// /proc/self/statm; ok is false where there is no /proc.
func serverRSS() (rss int64, ok bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// serverSettledRSS returns the process's resident memory once the Go
// heap has returned what it can to the system (0 where there is no
// /proc): the base a test measures its growth from. A test process's
// resident memory is what every test before has left (under -race, the
// detector's shadow of every heap page ever touched, which is never
// returned), so only its growth says what a test did.
func serverSettledRSS() int64 {
	debug.FreeOSMemory()
	rss, _ := serverRSS()
	return rss
}

// serverCheckRSS fails t if the process's resident memory grew by more
// than limit above base (serverSettledRSS at the test's start) even after
// the Go heap has returned what it can to the system: what the sessions
// left behind, not garbage not yet collected.
func serverCheckRSS(t testing.TB, base, limit int64) {
	t.Helper()
	if raceEnabled {
		limit *= serverRaceRSSFactor
	}
	rss, ok := serverRSS()
	if !ok || rss-base <= limit {
		return
	}
	debug.FreeOSMemory()
	if rss, _ = serverRSS(); rss-base > limit {
		t.Fatalf("resident memory %d MiB, %d MiB above the %d MiB at the start, more than the %d MiB allowed", rss>>20, (rss-base)>>20, base>>20, limit>>20)
	}
}

// serverFuzzRSSLimit bounds how much the resident memory of a process
// running FuzzServerSession grows from its start: the fuzzing engine's
// corpus and coverage, plus the sessions' servers (at most 4 x 64 KiB of
// payload buffers and 2 MiB of disks each).
const serverFuzzRSSLimit = 256 << 20

// serverRaceRSSFactor scales RSS limits under the race detector.
const serverRaceRSSFactor = 4
