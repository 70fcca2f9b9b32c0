package main

import (
	"context"
	"slices"
	"time"

	"github.com/nhdkit/nhd/ata"
)

// step runs one command of the lane's current workload outside any
// pipeline and returns the time the host spent on it: choosing it and
// filling its data, the command through the bridge, and verifying it.
func (l *lane) step(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	o, err := l.nextOp(ctx)
	if err != nil {
		return 0, err
	}
	sum, err := l.exec(o)
	if err != nil {
		return 0, err
	}
	o.sum = sum
	err = l.verifyOp(ctx, o)
	return time.Since(t0), err
}

// timedBackend is a backend that adds up the time its calls take (as
// bridge.Measure times its front end's memory disk).
type timedBackend struct {
	ata.Backend
	t time.Duration
}

func (b *timedBackend) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.ReadAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

func (b *timedBackend) WriteAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := b.Backend.WriteAt(p, off)
	b.t += time.Since(t0)
	return n, err
}

// durs is a series of per-command times.
type durs []time.Duration

// median returns the middle time (the mean of the two middle ones).
func (d durs) median() time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
