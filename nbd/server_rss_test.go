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

// serverCheckRSS fails t if the process's resident memory is above limit
// even after the Go heap has returned what it can to the system: what a
// session left behind, not garbage not yet collected.
func serverCheckRSS(t testing.TB, limit int64) {
	t.Helper()
	if raceEnabled {
		limit *= serverRaceRSSFactor
	}
	rss, ok := serverRSS()
	if !ok || rss <= limit {
		return
	}
	debug.FreeOSMemory()
	if rss, _ = serverRSS(); rss > limit {
		t.Fatalf("resident memory %d MiB, above the %d MiB limit", rss>>20, limit>>20)
	}
}

// serverFuzzRSSLimit bounds the resident memory of a process running
// FuzzServerSession: the fuzzing engine's own, plus the sessions' servers
// (at most 4 x 64 KiB of payload buffers and 2 MiB of disks each).
const serverFuzzRSSLimit = 256 << 20

// serverRaceRSSFactor scales RSS limits under the race detector.
const serverRaceRSSFactor = 4
