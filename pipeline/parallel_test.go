package pipeline

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// TestParallelRunsAtOnce: the workers of a Parallel stage are in Process at
// the same time (each waits for all the others on its first unit, which
// would never end if they ran one after another).
func TestParallelRunsAtOnce(t *testing.T) {
	checkNoLeaks(t)
	const workers = 4
	var wg sync.WaitGroup
	wg.Add(workers)
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	mk := func(w int) Stage[int, int] {
		first := true
		return StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
			if first {
				first = false
				wg.Done()
				select {
				case <-all:
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return x * 10, nil
		})
	}
	sink := &collect[int]{}
	p, err := Parallel(From("src", Source[int](&counter{n: 100})), 2, "par", workers, mk).To(Ring(2), "sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.Run(ctx)
	if err != nil {
		t.Fatalf("Run: %v (the workers did not run at once)", err)
	}
	if len(sink.got) != 100 || sink.got[99] != 990 || r.Stages[1].Workers != workers || r.Stages[1].Link != "parallel(4x2)" {
		t.Fatalf("sink got %d units; report %+v", len(sink.got), r.Stages[1])
	}
	if r.Stages[1].Latency.Count != 100 {
		t.Fatalf("the workers' histograms hold %d units, want 100", r.Stages[1].Latency.Count)
	}
}

// TestParallelStragglers: a worker fails on unit 0 while the others have
// run ahead and wait for room after the stage; they are stopped, and the
// sink sees nothing.
func TestParallelStragglers(t *testing.T) {
	checkNoLeaks(t)
	mk := func(w int) Stage[int, int] {
		return StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
			if x == 0 {
				time.Sleep(20 * time.Millisecond) // let the others fill their rings
				return 0, errBoom
			}
			return x, nil
		})
	}
	sink := &collect[int]{}
	p, err := Parallel(From("src", Source[int](&counter{n: 1 << 20})), 4, "par", 3, mk).To(Ring(1), "sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Run(context.Background())
	var se *StageError
	if !errors.As(err, &se) || se.Index != 1 || se.Unit != 0 {
		t.Fatalf("Run: %v", err)
	}
	if len(sink.got) != 0 || r.Stages[2].State != StateDone || r.Stages[1].State != StateFailed {
		t.Fatalf("sink got %d; report %+v", len(sink.got), r.Stages)
	}
}

func TestParallelCancel(t *testing.T) {
	checkNoLeaks(t)
	started := make(chan struct{}, 1)
	p, err := Parallel(From("src", Source[int](&counter{n: 1 << 20})), 4, "stuck", 3,
		func(int) Stage[int, int] { return blockUntilDone(started) }).To(Ring(4), "sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	r, err := p.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	for _, s := range r.Stages {
		if s.State != StateStopped {
			t.Errorf("stage %q: %v", s.Name, s.State)
		}
	}
}

func TestParallelBuildErrors(t *testing.T) {
	src := Source[int](&counter{n: 1})
	id := func(int) Stage[int, int] {
		return StageFunc[int, int](func(ctx context.Context, x int) (int, error) { return x, nil })
	}
	sink := &collect[int]{}
	for _, tt := range []struct {
		name  string
		build func() (*Pipeline, error)
		want  error
	}{
		{"no workers", func() (*Pipeline, error) { return Parallel(From("s", src), 1, "p", 0, id).To(Ring(1), "k", sink) }, ErrLink},
		{"no room", func() (*Pipeline, error) { return Parallel(From("s", src), 0, "p", 2, id).To(Ring(1), "k", sink) }, ErrLink},
		{"nil maker", func() (*Pipeline, error) {
			return Parallel[int, int](From("s", src), 1, "p", 2, nil).To(Ring(1), "k", sink)
		}, ErrNil},
		{"nil stage", func() (*Pipeline, error) {
			return Parallel(From("s", src), 1, "p", 2, func(int) Stage[int, int] { return nil }).To(Ring(1), "k", sink)
		}, ErrNil},
		{"inline after", func() (*Pipeline, error) { return Parallel(From("s", src), 1, "p", 2, id).To(Inline(), "k", sink) }, ErrLink},
		{"chan after", func() (*Pipeline, error) { return Parallel(From("s", src), 1, "p", 2, id).To(Chan(4), "k", sink) }, ErrLink},
		{"parallel after", func() (*Pipeline, error) {
			return Parallel(Parallel(From("s", src), 1, "p", 2, id), 1, "q", 2, id).To(Ring(1), "k", sink)
		}, ErrLink},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := tt.build(); !errors.Is(err, tt.want) || p != nil {
				t.Fatalf("got %v, %v; want %v", p, err, tt.want)
			}
		})
	}
}

// TestParallelCores: the Cores bound counts a Parallel stage's whole time
// per unit, since its workers share the processors too.
func TestParallelCores(t *testing.T) {
	id := func(int) Stage[int, int] {
		return StageFunc[int, int](func(ctx context.Context, x int) (int, error) { return x, nil })
	}
	p, err := Parallel(From("src", Source[int](&counter{})), 1, "par", 4, id).To(Ring(1), "sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument, p.Cores = true, 1
	p.e2e = new(Histogram)
	per := []int64{1000, 8000, 1000} // ns per unit; the parallel stage 8 µs over 4 workers
	for i, nd := range p.nodes {
		nd.units, nd.state = 100, StateDone
		nd.stats = &stats{busy: per[i] * 100}
	}
	r := p.report(time.Millisecond, nil)
	// On one core: 10 µs of work per unit, whatever the workers.
	if want := 1 / 10e-6; math.Abs(float64(r.Predicted)-want) > 1e-6*want {
		t.Errorf("1 core: predicted %v units/s, want %v", float64(r.Predicted), want)
	}
	p.Cores = 0 // each segment its own processor: the bottleneck is 2 µs a unit
	r = p.report(time.Millisecond, nil)
	if r.Bottleneck != "par" || math.Abs(float64(r.Pipelined)-1/2e-6) > 1e-6/2e-6 {
		t.Errorf("no core limit: bottleneck %q, pipelined %v", r.Bottleneck, float64(r.Pipelined))
	}
}
