package main

import (
	"fmt"
	"io"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// progress prints the copy's progress at most five times a second, on
// one line rewritten in place, then a summary.
type progress struct {
	w     io.Writer
	start time.Time
	last  time.Time
}

// update is CopyOptions.Progress: its calls do not overlap.
func (p *progress) update(s nbd.CopyStats) {
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	pct := 100.0
	if s.Size > 0 {
		pct = float64(s.Done) * 100 / float64(s.Size)
	}
	fmt.Fprintf(p.w, "\r%5.1f%% of %d bytes", pct, s.Size)
}

func (p *progress) finish(s nbd.CopyStats, err error) {
	state := "copied"
	if err != nil {
		state = "stopped"
	}
	fmt.Fprintf(p.w, "\r%s %d of %d bytes in %v: %d data, %d zeroed, %d skipped\n",
		state, s.Done, s.Size, time.Since(p.start).Round(time.Millisecond), s.Data, s.Zeroed, s.Skipped)
}
