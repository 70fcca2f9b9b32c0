package pipeline

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeRun builds src -> a -> b -> sink and fills in what a run of n
// units of k bytes with the given per-unit times would have measured.
func fakeRun(t *testing.T, n uint64, k int, per []time.Duration, wall time.Duration) Report {
	t.Helper()
	id := StageFunc[[]byte, []byte](func(ctx context.Context, b []byte) ([]byte, error) { return b, nil })
	src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) { return nil, nil })
	size := func(b []byte) int { return len(b) }
	l := Then(From("src", Source[[]byte](src)).Size(size), "a", Stage[[]byte, []byte](id)).Size(size)
	l = Then(l, "b", Stage[[]byte, []byte](id)).Size(size)
	p, err := l.To("sink", &collect[[]byte]{})
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument = true
	p.e2e = new(Histogram)
	for i, nd := range p.nodes {
		nd.units, nd.state = n, StateDone
		nd.stats = &stats{busy: int64(per[i]) * int64(n), bytes: n * uint64(k)}
		for range n {
			nd.stats.hist.Record(per[i])
		}
	}
	for i := range n {
		p.e2e.Record(time.Duration(i) * time.Microsecond)
	}
	r := p.report(wall, nil)
	r.CPU = wall / 2
	return r
}

// TestReportModel checks the report's model side against the formulas
// written out by hand.
func TestReportModel(t *testing.T) {
	const n, k = 1000, 4096
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	wall := 7000 * time.Microsecond
	r := fakeRun(t, n, k, per, wall)

	sec := func(d time.Duration) float64 { return d.Seconds() }
	total := sec(per[0] + per[1] + per[2] + per[3]) // the stages take turns
	want := struct{ measured, predicted, pipelined, share float64 }{
		measured:  n * k / wall.Seconds(),
		predicted: k / total,
		pipelined: k / sec(per[1]),
		share:     sec(per[1]) / total,
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	near("measured", float64(r.Measured), want.measured)
	near("predicted", float64(r.Predicted), want.predicted)
	near("pipelined", float64(r.Pipelined), want.pipelined)
	near("error", r.ModelError, (want.predicted-want.measured)/want.measured)
	near("share", r.Share, want.share)
	if r.Bottleneck != "a" || r.BottleneckAt != 1 {
		t.Errorf("bottleneck %q at %d, want a at 1", r.Bottleneck, r.BottleneckAt)
	}
	for i, s := range r.Stages {
		near(s.Name+" rate", float64(s.Rate), k/sec(per[i]))
		near(s.Name+" share", s.Share, sec(per[i])/total)
		if s.PerUnit != per[i] || s.Latency.P50 != per[i] {
			t.Errorf("%s: per unit %v, p50 %v; want %v", s.Name, s.PerUnit, s.Latency.P50, per[i])
		}
	}
	if r.Units != n || r.Bytes != n*k || r.UnitBytes != k || r.RateUnit != "B/s" {
		t.Errorf("units %d bytes %d unit %v %s", r.Units, r.Bytes, r.UnitBytes, r.RateUnit)
	}
}

// TestReportSeries: without sizes the prediction is in units per second,
// Σ t_i per unit.
func TestReportSeries(t *testing.T) {
	p, err := Then(From("src", Source[int](&counter{n: 0})), "x", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return x, nil })).To("sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument = true
	p.e2e = new(Histogram)
	per := []int64{1000, 5000, 4000}
	for i, nd := range p.nodes {
		nd.units, nd.state = 100, StateDone
		nd.stats = &stats{busy: per[i] * 100}
	}
	r := p.report(time.Millisecond, nil)
	if r.RateUnit != "units/s" || r.UnitBytes != 1 {
		t.Fatalf("unit %q %v", r.RateUnit, r.UnitBytes)
	}
	want := 1 / 10e-6 // units per second: 10 µs per unit
	if math.Abs(float64(r.Predicted)-want) > 1e-6*want {
		t.Errorf("predicted %v units/s, want %v", float64(r.Predicted), want)
	}
	if math.Abs(float64(r.Measured)-1e5) > 1e-3 || math.Abs(r.ModelError) > 1e-9 {
		t.Errorf("measured %v, error %v", r.Measured, r.ModelError)
	}
}

func TestReportJSON(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 10, 512, per, 40*time.Microsecond)
	r.Stages[2].State, r.Stages[2].Err, r.Err = StateFailed, "boom", "pipeline: boom"
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, back, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	for _, key := range []string{`"predicted"`, `"measured"`, `"model_error"`, `"bottleneck": "a"`, `"state": "failed"`, `"p999_ns"`, `"pipeline": "src -> a -> b -> sink"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b)
		}
	}
}

func TestReportTable(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 1000, 4096, per, 7000*time.Microsecond)
	want := `pipeline: src -> a -> b -> sink
  stage  state  units    bytes   busy  per unit        rate  share    p50    p99  p99.9
    src   done   1000  4096000    1ms       1µs  3906 MiB/s  15.4%    1µs    1µs    1µs
      a   done   1000  4096000    3ms       3µs  1302 MiB/s  46.2%    3µs    3µs    3µs
      b   done   1000  4096000    2ms       2µs  1953 MiB/s  30.8%    2µs    2µs    2µs
   sink   done   1000  4096000  500µs     500ns  7812 MiB/s   7.7%  500ns  500ns  500ns
end to end: 1000 units, 4096000 bytes in 7ms: measured 558 MiB/s (process CPU 3.5ms, 0.50 cores busy)
model: series 601 MiB/s, error +7.7% (pipelined 1302 MiB/s)
bottleneck: a, 46.2% of the time per unit
latency end to end: p50 496µs, p99 991µs, p99.9 991µs, max 999µs
`
	if diff := cmp.Diff(want, r.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestReportStage(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 10, 512, per, 40*time.Microsecond)
	if s, ok := r.Stage("b"); !ok || s.Index != 2 || s.PerUnit != per[2] {
		t.Errorf("Stage(b): %+v, %v", s, ok)
	}
	if _, ok := r.Stage("nbd"); ok {
		t.Error("Stage(nbd) found a stage that is not there")
	}
}
