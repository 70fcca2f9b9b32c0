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
	"github.com/nhdkit/nhd/model"
)

// fakeRun builds src -> a -> ring -> b -> sink and fills in what a run of n
// units of k bytes with the given per-unit times would have measured.
func fakeRun(t *testing.T, n uint64, k int, per []time.Duration, wall time.Duration, cores int) Report {
	t.Helper()
	id := StageFunc[[]byte, []byte](func(ctx context.Context, b []byte) ([]byte, error) { return b, nil })
	src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) { return nil, nil })
	size := func(b []byte) int { return len(b) }
	l := Then(From("src", Source[[]byte](src)).Size(size), Inline(), "a", Stage[[]byte, []byte](id)).Size(size)
	l = Then(l, Ring(8), "b", Stage[[]byte, []byte](id)).Size(size)
	p, err := l.To(Inline(), "sink", &collect[[]byte]{})
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument = true
	p.Cores = cores
	p.e2e = new(Histogram)
	for i, nd := range p.nodes {
		nd.units, nd.state = n, StateDone
		nd.stats = &stats{busy: int64(per[i]) * int64(n), bytes: n * uint64(k)}
		if nd.link.Overlapped() {
			nd.stats.queued = int64(n) * int64(3*time.Microsecond)
		}
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
	wall := 4100 * time.Microsecond
	r := fakeRun(t, n, k, per, wall, 0)

	sec := func(d time.Duration) float64 { return d.Seconds() }
	seg0 := sec(per[0] + per[1]) // src and a: one goroutine
	seg1 := sec(per[2] + per[3]) // b and sink: the other
	total := seg0 + seg1
	fill := seg0 + seg1 + (n-1)*math.Max(seg0, seg1) // first unit through both, the rest at the slower pace
	want := struct {
		measured, predicted, series, pipelined float64
		share                                  float64
	}{
		measured:  n * k / wall.Seconds(),
		predicted: n * k / fill,
		series:    k / total,
		pipelined: k / math.Max(seg0, seg1),
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
	near("series", float64(r.Series), want.series)
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
	// On one core the overlapped segments take turns: the series rate.
	r1 := fakeRun(t, n, k, per, wall, 1)
	near("1 core", float64(r1.Predicted), want.series)
	// On two they fill and then run at the bottleneck, as with no limit.
	r2 := fakeRun(t, n, k, per, wall, 2)
	near("2 cores", float64(r2.Predicted), want.predicted)
	// The model package agrees with the hand-written fill formula.
	m := model.Overlap("", k,
		model.NewNode("0", model.PerUnit("src", k, per[0]), model.PerUnit("a", k, per[1])),
		model.NewNode("1", model.PerUnit("b", k, per[2]), model.PerUnit("sink", k, per[3])))
	near("model.Overlap", float64(m.Rate(n*k)), want.predicted)
}

// TestReportSeries: with every link inline the prediction is the series
// rate, Σ t_i per unit.
func TestReportSeries(t *testing.T) {
	p, err := Then(From("src", Source[int](&counter{n: 0})), Inline(), "x", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return x, nil })).To(Inline(), "sink", &collect[int]{})
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
	if math.Abs(float64(r.Predicted)-want) > 1e-6*want || math.Abs(float64(r.Series)-want) > 1e-6*want {
		t.Errorf("predicted %v, series %v units/s, want %v", float64(r.Predicted), float64(r.Series), want)
	}
	if math.Abs(float64(r.Measured)-1e5) > 1e-3 || math.Abs(r.ModelError) > 1e-9 {
		t.Errorf("measured %v, error %v", r.Measured, r.ModelError)
	}
}

func TestReportJSON(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 10, 512, per, 40*time.Microsecond, 2)
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
	for _, key := range []string{`"predicted"`, `"measured"`, `"model_error"`, `"bottleneck": "a"`, `"state": "failed"`, `"p999_ns"`, `"wait_in_ns"`, `"pipeline": "src -> a -> ring(8) -> b -> sink"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b)
		}
	}
}

func TestReportTable(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 1000, 4096, per, 4100*time.Microsecond, 0)
	want := `pipeline: src -> a -> ring(8) -> b -> sink
  stage     link  state  units    bytes   busy  per unit        rate  share  wait in  wait out  queued    p50    p99  p99.9
    src        -   done   1000  4096000    1ms       1µs  3906 MiB/s  15.4%        0         0       0    1µs    1µs    1µs
      a   inline   done   1000  4096000    3ms       3µs  1302 MiB/s  46.2%        0         0       0    3µs    3µs    3µs
      b  ring(8)   done   1000  4096000    2ms       2µs  1953 MiB/s  30.8%        0         0     3µs    2µs    2µs    2µs
   sink   inline   done   1000  4096000  500µs     500ns  7812 MiB/s   7.7%        0         0       0  500ns  500ns  500ns
end to end: 1000 units, 4096000 bytes in 4.1ms: measured 952.7 MiB/s (process CPU 2.05ms, 0.50 cores busy)
model: predicted 976 MiB/s, error +2.4% (series 601 MiB/s, pipelined 976.6 MiB/s)
bottleneck: a, 46.2% of the time per unit
latency end to end: p50 496µs, p99 991µs, p99.9 991µs, max 999µs
`
	if diff := cmp.Diff(want, r.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestReportStage(t *testing.T) {
	per := []time.Duration{1 * time.Microsecond, 3 * time.Microsecond, 2 * time.Microsecond, 500 * time.Nanosecond}
	r := fakeRun(t, 10, 512, per, 40*time.Microsecond, 0)
	if s, ok := r.Stage("b"); !ok || s.Index != 2 || s.PerUnit != per[2] {
		t.Errorf("Stage(b): %+v, %v", s, ok)
	}
	if _, ok := r.Stage("nbd"); ok {
		t.Error("Stage(nbd) found a stage that is not there")
	}
}
