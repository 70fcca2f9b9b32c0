//go:build !race

package pipeline

import (
	"context"
	"io"
	"runtime"
	"testing"
)

// countSource hands out the same sector n times.
type countSource struct {
	n   int
	buf []byte
}

func (s *countSource) Next(ctx context.Context) ([]byte, error) {
	if s.n == 0 {
		return nil, io.EOF
	}
	s.n--
	return s.buf, nil
}

// mallocs returns the heap allocations one run of n units makes.
func mallocs(t *testing.T, p *Pipeline, src *countSource, n int) uint64 {
	var before, after runtime.MemStats
	src.n = n
	runtime.ReadMemStats(&before)
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// TestNoAllocationPerUnit: a run allocates when it starts and not per unit,
// instrumented or not. A run of many units must allocate no more than a
// run of few, give or take what the runtime allocates on its own now and
// then: at most slack, where one allocation per unit would be thousands.
// The best of a few tries counts.
func TestNoAllocationPerUnit(t *testing.T) {
	const few, many, slack = 100, 20000, 32
	for _, inst := range []bool{false, true} {
		src := &countSource{buf: make([]byte, 512)}
		p := sectorPipeline(t, src, &discard{})
		p.Instrument = inst
		mallocs(t, p, src, few) // warm up: the first run makes the stats
		best := ^uint64(0)
		var a, b uint64
		for range 5 {
			a, b = mallocs(t, p, src, few), mallocs(t, p, src, many)
			best = min(best, b-min(a, b))
			if best <= slack {
				break
			}
		}
		if best > slack {
			t.Errorf("instrument %v: %d units allocate %d, %d units %d", inst, few, a, many, b)
		}
		t.Logf("instrument %v: %d allocations per run", inst, a)
	}
}
