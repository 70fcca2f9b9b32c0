package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// The program runs every job on both pairs and prints a row for each; the
// figures themselves are not checked (speed is never asserted in tests).
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("fills two 64 MiB disks per job")
	}
	var out bytes.Buffer
	if err := run(&out, 20*time.Millisecond, 2); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+2*len(jobs) || !strings.Contains(lines[0], "ratio of each round") {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines[1:] {
		// job name (three words), queues, 2 rates, ratio, 2 CPU figures, 2 rounds' ratios
		if f := strings.Fields(l); len(f) != 11 {
			t.Errorf("row %q: %d fields, want 11", l, len(f))
		}
	}
	if err := run(io.Discard, time.Millisecond, 0); err == nil {
		t.Error("-rounds 0 accepted")
	}
}

// median takes the middle of an odd count and the mean of the middle two
// of an even one, rate and CPU apart.
func TestMedian(t *testing.T) {
	rs := []result{{bps: 3, cpuPerGB: 1}, {bps: 1, cpuPerGB: 9}, {bps: 2, cpuPerGB: 5}}
	if got := median(rs); got != (result{bps: 2, cpuPerGB: 5}) {
		t.Errorf("median of three: %+v", got)
	}
	if got := median(rs[:2]); got != (result{bps: 2, cpuPerGB: 5}) {
		t.Errorf("median of two: %+v", got)
	}
}

// The count mode runs each job on each pair and names the sockets of both
// sides, which syscalls.sh needs to count them apart.
func TestCount(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 64 MiB disk per run")
	}
	for _, pair := range []string{"nvme", "nbd"} {
		for _, j := range jobs {
			var sides bytes.Buffer
			if err := count(&sides, pair, j, 100, 1); err != nil {
				t.Fatalf("%s %s: %v", pair, j.name, err)
			}
			out := sides.String()
			if !strings.Contains(out, " host\n") || !strings.Contains(out, " target\n") {
				t.Errorf("%s %s: sides printed:\n%s", pair, j.name, out)
			}
		}
	}
	if _, ok := findJob("4KiB-randread-qd32"); !ok {
		t.Error("findJob does not find the 4 KiB job by its dashed name")
	}
	if err := count(io.Discard, "iscsi", jobs[0], 1, 1); err == nil {
		t.Error("count accepted an unknown pair")
	}
}
