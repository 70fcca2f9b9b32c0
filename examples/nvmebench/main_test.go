package main

import (
	"bytes"
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
	if err := run(&out, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+2*len(jobs) || !strings.Contains(lines[0], "ratio") {
		t.Fatalf("output:\n%s", out.String())
	}
}
