package model

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const us = time.Microsecond

func TestSeriesPipelinedEdges(t *testing.T) {
	inf := Rate(math.Inf(1))
	tests := []struct {
		name          string
		rates         []Rate
		series, piped Rate
	}{
		{"none", nil, inf, inf},
		{"one", []Rate{5}, 5, 5},
		{"two equal", []Rate{4, 4}, 2, 4},
		{"paper table 4 shape", []Rate{3, 6}, 2, 3},
		{"stopped node", []Rate{3, 0}, 0, 0},
		{"negative is stopped", []Rate{3, -1}, 0, 0},
		{"free node", []Rate{3, inf}, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Series(tc.rates...); got != tc.series {
				t.Errorf("Series = %v, want %v", got, tc.series)
			}
			if got := Pipelined(tc.rates...); got != tc.piped {
				t.Errorf("Pipelined = %v, want %v", got, tc.piped)
			}
		})
	}
}

func TestRateUnits(t *testing.T) {
	r := RateOf(64<<10, 4745*us)
	if got := r.String(); got != "13.17 MiB/s" {
		t.Errorf("String = %q", got)
	}
	if got := r.MBps(); math.Abs(got-13.8116) > 1e-4 {
		t.Errorf("MBps = %v", got)
	}
	if got := Rate(0).Seconds(1); !math.IsInf(got, 1) {
		t.Errorf("stopped node time = %v", got)
	}
	if got := RateOf(1, 0); !math.IsInf(float64(got), 1) {
		t.Errorf("RateOf in no time = %v", got)
	}
}

func TestTermCount(t *testing.T) {
	tests := []struct {
		name string
		term Term
		k    int64
		want int64
	}{
		{"once", Once("x", us), 65536, 1},
		{"once, empty block", Once("x", us), 0, 0},
		{"sectors", PerUnit("x", 512, us), 65536, 128},
		{"partial sector", PerUnit("x", 512, us), 513, 2},
		{"packets", PerUnit("x", 1448, us), 65536, 46},
		{"one packet", PerUnit("x", 1448, us), 1, 1},
		{"acks", PerUnit("x", 1448, us).OnePer(7), 65536, 7},
		{"ack for a packet", PerUnit("x", 1448, us).OnePer(7), 100, 1},
		{"acks at 7 packets", PerUnit("x", 1448, us).OnePer(7), 7 * 1448, 1},
		{"acks past 7 packets", PerUnit("x", 1448, us).OnePer(7), 7*1448 + 1, 2},
		{"bytes", Streaming("x", 1), 1000, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.term.Count(tc.k); got != tc.want {
				t.Errorf("Count(%d) = %d, want %d", tc.k, got, tc.want)
			}
		})
	}
	if got := Once("irq", 60*us).Times(2).Seconds(1); math.Abs(got-120e-6) > 1e-15 {
		t.Errorf("two interrupts = %v s", got)
	}
}

func TestTermPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"unit 0":         func() { PerUnit("x", 0, us) },
		"negative cost":  func() { Once("x", -us) },
		"OnePer 0":       func() { PerUnit("x", 1, us).OnePer(0) },
		"OnePer on Once": func() { Once("x", us).OnePer(2) },
		"Times NaN":      func() { Once("x", us).Times(math.NaN()) },
		"Faster 0":       func() { RateNode("x", 1).Faster(0) },
		"Cascade.Faster": func() { Cascade{RateNode("x", 1)}.Faster(0, -1) },
		"Streaming -1":   func() { Streaming("x", -1) },
		"RateNode NaN":   func() { RateNode("x", Rate(math.NaN())) },
		"CostNode -1ns":  func() { CostNode("x", Cost{Fixed: -1, Bandwidth: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

// Overlap's fill formula on stages with known per-chunk times.
func TestOverlapFill(t *testing.T) {
	a := NewNode("a", Once("setup", 100*us), PerUnit("a", 100, 10*us)) // 10 us per 100 B
	b := NewNode("b", PerUnit("b", 100, 30*us))                        // 30 us per 100 B
	const k = 1000
	tests := []struct {
		chunk int64
		want  float64 // us
	}{
		{0, 100 + 300},                     // cut-through: setup + the bottleneck
		{1000, 100 + 100 + 300},            // one chunk: series
		{5000, 100 + 100 + 300},            // chunk larger than the block
		{100, 100 + (10 + 30) + 9*30},      // first chunk through both, 9 more at b's pace
		{300, 100 + (30 + 90) + 2*90 + 30}, // 300+300+300+100: last chunk short
	}
	for _, tc := range tests {
		got := Overlap("ab", tc.chunk, a, b).Seconds(k) * 1e6
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("chunk %d: %v us, want %v", tc.chunk, got, tc.want)
		}
	}
	// An Overlap is a node: it nests in a cascade and in another Overlap.
	c := Cascade{Once1("host", 50*us), Overlap("ab", 100, a, b)}
	if got, want := c.Seconds(k)*1e6, 50+100+40+270.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("cascade with overlap = %v us, want %v", got, want)
	}
	outer := Overlap("outer", 0, Overlap("ab", 0, a, b), RateNode("net", Rate(1e6)))
	if got, want := outer.Seconds(k)*1e6, 100+math.Max(300, 1000); math.Abs(got-want) > 1e-9 {
		t.Errorf("nested overlap = %v us, want %v", got, want)
	}
	if got := len(outer.Stages()); got != 2 {
		t.Errorf("Stages = %d", got)
	}
	if got := outer.Faster(2).Seconds(k) * 1e6; math.Abs(got-550) > 1e-9 {
		t.Errorf("nested overlap 2x faster = %v us, want 550", got)
	}
}

func Once1(name string, d time.Duration) Node { return NewNode(name, Once(name, d)) }

func TestShares(t *testing.T) {
	c := Cascade{Once1("a", 100*us), Once1("b", 300*us)}
	got := c.Predict(1000)
	want := Prediction{
		Block: 1000, Seconds: 400e-6, Series: 1000 / 400e-6, Pipelined: 1000 / 300e-6,
		Shares: []Share{
			{Index: 0, Name: "a", Seconds: 100e-6, Rate: 1e7, Fraction: 0.25},
			{Index: 1, Name: "b", Seconds: 300e-6, Rate: 1000 / 300e-6, Fraction: 0.75},
		},
		Bottleneck: Share{Index: 1, Name: "b", Seconds: 300e-6, Rate: 1000 / 300e-6, Fraction: 0.75},
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(1e-12, 0)); d != "" {
		t.Errorf("Predict (-want +got):\n%s", d)
	}
	if d := cmp.Diff(got.Bottleneck, c.Bottleneck(1000)); d != "" {
		t.Errorf("Bottleneck differs from Predict's: %s", d)
	}
	if b := (Cascade{}).Bottleneck(1); b.Index != -1 {
		t.Errorf("empty cascade bottleneck = %+v", b)
	}
	stopped := Cascade{RateNode("x", 0), RateNode("y", 5), RateNode("z", 0)}
	var fr []float64
	for _, s := range stopped.Shares(10) {
		fr = append(fr, s.Fraction)
	}
	if d := cmp.Diff([]float64{0.5, 0, 0.5}, fr); d != "" {
		t.Errorf("stopped nodes' fractions: %s", d)
	}
	if got := stopped.Series(10); got != 0 {
		t.Errorf("stopped cascade rate = %v", got)
	}
}

func TestAtDepth(t *testing.T) {
	c := Cascade{Once1("a", 100*us), Once1("b", 300*us)} // 400 us a block, b limits to 1 per 300 us
	for _, tc := range []struct {
		depth int
		want  float64 // blocks per second
	}{{0, 0}, {1, 2500}, {2, 1e6 / 300}, {8, 1e6 / 300}} {
		if got := float64(c.AtDepth(1, tc.depth)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("depth %d: %v, want %v", tc.depth, got, tc.want)
		}
	}
}

func TestLittle(t *testing.T) {
	// The SSD seed: 207,977 IOPS at 4 KiB; with 64 requests in flight each
	// takes 64/207977 s.
	if got := IOPS(64, Latency(64, 207977)); math.Abs(got-207977) > 1 {
		t.Errorf("IOPS = %v", got)
	}
	if got := Bandwidth(IOPS(32, 250*us), 8<<10).MiBps(); got != 1000 {
		t.Errorf("32 deep at 250 us, 8 KiB = %v MiB/s, want 1000", got)
	}
	if got := Depth(4000, 250*us); got != 1 {
		t.Errorf("Depth = %v", got)
	}
	if IOPS(1, 0) != 0 || Latency(1, 0) != 0 {
		t.Error("zero latency or rate should give 0")
	}
}

func TestFitErrors(t *testing.T) {
	good := Sample{4096, 1e-3}
	tests := []struct {
		name    string
		samples []Sample
		want    error
	}{
		{"none", nil, ErrTooFewSamples},
		{"one", []Sample{good}, ErrTooFewSamples},
		{"one size", []Sample{good, {4096, 2e-3}}, ErrTooFewSamples},
		{"zero bytes", []Sample{good, {0, 1}}, ErrBadSample},
		{"zero time", []Sample{good, {8192, 0}}, ErrBadSample},
		{"NaN time", []Sample{good, {8192, math.NaN()}}, ErrBadSample},
		{"infinite time", []Sample{good, {8192, math.Inf(1)}}, ErrBadSample},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := FitCost(tc.samples); !errors.Is(err, tc.want) {
				t.Errorf("FitCost err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := FitFixed(nil, 1); !errors.Is(err, ErrTooFewSamples) {
		t.Errorf("FitFixed(nil) err = %v", err)
	}
	if _, err := FitFixed([]Sample{{-1, 1}}, 1); !errors.Is(err, ErrBadSample) {
		t.Errorf("FitFixed(bad) err = %v", err)
	}
}

func TestFitNoisy(t *testing.T) {
	// A line with a known wobble: residuals and errors must report it.
	c := Cost{Fixed: 500 * us, Bandwidth: 10 * MBPerSecond}
	var s []Sample
	wobble := []float64{+20e-6, -20e-6, +20e-6, -20e-6}
	for i, k := range []int64{4096, 8192, 16384, 32768} {
		s = append(s, Sample{k, c.Seconds(k) + wobble[i]})
	}
	f, err := FitCost(s)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, r := range f.Residuals {
		sum += r
	}
	// They would sum to 0 but for Fixed's rounding to the nanosecond.
	if math.Abs(sum) > float64(len(s))*0.5e-9 {
		t.Errorf("residuals of a least-squares line sum to %v", sum)
	}
	if f.RMS <= 0 || f.MaxRel <= 0 || f.R2 >= 1 || f.R2 < 0.99 {
		t.Errorf("errors of a wobbly fit: %+v", f)
	}
	ff, err := FitFixed(s, c.Bandwidth)
	if err != nil {
		t.Fatal(err)
	}
	if ff.Cost.Fixed != c.Fixed || math.Abs(ff.RMS-20e-6) > 1e-12 {
		t.Errorf("FitFixed = %+v", ff)
	}
}

func TestCost(t *testing.T) {
	c := Cost{Fixed: time.Millisecond, Bandwidth: MBPerSecond}
	if got := c.HalfBlock(); math.Abs(got-1000) > 1e-9 {
		t.Errorf("HalfBlock = %v", got)
	}
	if got := c.Rate(1000); math.Abs(float64(got-c.Asymptote()/2)) > 1e-6 {
		t.Errorf("rate at HalfBlock = %v, asymptote %v", got, c.Asymptote())
	}
	if got := c.String(); got != "1000.0 µs + 0.9537 MiB/s" {
		t.Errorf("String = %q", got)
	}
	if got := CostNode("n", c).Seconds(1000); math.Abs(got-c.Seconds(1000)) > 1e-15 {
		t.Errorf("CostNode time = %v", got)
	}
	if got := (Cost{Bandwidth: Rate(math.Inf(1))}).Asymptote(); !math.IsInf(float64(got), 1) {
		t.Errorf("free asymptote = %v", got)
	}
	if got := (Cost{Fixed: 5 * us, Bandwidth: Rate(math.Inf(1))}).Seconds(1 << 40); got != 5e-6 {
		t.Errorf("a cost without a per-byte part takes %v s", got)
	}
	d := Cost{Fixed: 3 * time.Millisecond, Bandwidth: 2 * MBPerSecond}.Sub(c)
	if d.Fixed != 2*time.Millisecond || math.Abs(d.SecondsPerByte()+0.5e-6) > 1e-18 || !errors.Is(d.Check(), ErrNonPhysical) {
		t.Errorf("Sub = %v (%v s/B), Check %v", d, d.SecondsPerByte(), d.Check())
	}
}

func TestChain(t *testing.T) {
	a := NewNode("a", Once("x", 100*us), PerUnit("s", 512, 10*us))
	b := RateNode("b", 1e6)
	c := Cascade{a, b}
	ch := Chain("ab", a, b)
	for _, k := range []int64{1, 512, 513, 1 << 20} {
		if got, want := ch.Seconds(k), c.Seconds(k); math.Abs(got-want) > 1e-15*want {
			t.Errorf("k=%d: chain %v s, cascade %v s", k, got, want)
		}
	}
	// A chain inside an overlap streams as one stage.
	o := Overlap("o", 0, ch, RateNode("c", 1e5))
	if got, want := o.Seconds(1000), 100e-6+math.Max(20e-6+1e-3, 1e-2); math.Abs(got-want) > 1e-15 {
		t.Errorf("overlap of a chain = %v, want %v", got, want)
	}
}

// Non-physical rates and costs are refused with ErrNonPhysical; zero and
// infinite rates are a stopped and a free node.
func TestNonPhysicalNodes(t *testing.T) {
	inf := Rate(math.Inf(1))
	for _, tc := range []struct {
		name string
		r    Rate
		ok   bool
	}{{"stopped", 0, true}, {"free", inf, true}, {"1 B/s", 1, true}, {"negative", -1, false}, {"NaN", Rate(math.NaN()), false}} {
		n, err := NewRateNode("x", tc.r)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrNonPhysical)) {
			t.Errorf("NewRateNode(%s) = %v, %v", tc.name, n, err)
		}
	}
	for _, tc := range []struct {
		name string
		c    Cost
		ok   bool
	}{
		{"fixed only", Cost{Fixed: us, Bandwidth: inf}, true},
		{"affine", Cost{Fixed: us, Bandwidth: MBPerSecond}, true},
		{"free", Cost{Bandwidth: inf}, true},
		{"negative fixed", Cost{Fixed: -us, Bandwidth: MBPerSecond}, false},
		{"negative bandwidth", Cost{Fixed: us, Bandwidth: -MBPerSecond}, false},
		{"zero bandwidth", Cost{Fixed: us}, false},
		{"NaN bandwidth", Cost{Bandwidth: Rate(math.NaN())}, false},
	} {
		n, err := NewCostNode("x", tc.c)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrNonPhysical)) {
			t.Errorf("NewCostNode(%s) = %v, %v", tc.name, n, err)
		}
		if tc.ok {
			if got, want := n.Seconds(1000), tc.c.Seconds(1000); math.Abs(got-want) > 1e-15 {
				t.Errorf("%s: node time %v, cost %v", tc.name, got, want)
			}
		}
	}
}

// A fit whose best line is not physical comes back in full, with an error
// the caller must check.
func TestFitNonPhysical(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []Sample
		part    string
	}{
		// Small blocks far cheaper than the line through the big ones.
		{"negative fixed", []Sample{{1000, 1e-6}, {2000, 3e-3}, {3000, 5e-3}}, "fixed"},
		// Bigger blocks took less time.
		{"negative slope", []Sample{{1000, 2e-3}, {2000, 1e-3}}, "bandwidth"},
	} {
		f, err := FitCost(tc.samples)
		if !errors.Is(err, ErrNonPhysical) || !strings.Contains(err.Error(), tc.part) {
			t.Errorf("%s: FitCost err = %v, want ErrNonPhysical naming %s", tc.name, err, tc.part)
		}
		if f.N != len(tc.samples) || len(f.Residuals) != f.N || f.Cost.Check() == nil {
			t.Errorf("%s: the fit that comes with the error: %+v", tc.name, f)
		}
		if _, err := NewCostNode("fit", f.Cost); !errors.Is(err, ErrNonPhysical) {
			t.Errorf("%s: NewCostNode accepted the fit: %v", tc.name, err)
		}
	}
	// Exact data with no fixed cost: zero, not an ulp below.
	var s []Sample
	for _, k := range []int64{3, 7, 1000, 12345} {
		s = append(s, Sample{k, float64(k) / 3e7})
	}
	if f, err := FitCost(s); err != nil || f.Cost.Fixed != 0 {
		t.Errorf("FitCost of a line through 0 = %v, %v", f.Cost, err)
	}
	if _, err := FitFixed(s, -1); !errors.Is(err, ErrNonPhysical) {
		t.Errorf("FitFixed at a negative bandwidth: %v", err)
	}
}

func TestRateIn(t *testing.T) {
	r := 16 * MBPerSecond
	for unit, want := range map[Rate]string{
		MBPerSecond: "16 MB/s", MiBPerSecond: "15.26 MiB/s", BytePerSecond: "1.6e+07 B/s",
		GBPerSecond: "0.016 GB/s", GiBPerSecond: "0.0149 GiB/s", 3: "1.6e+07 B/s",
	} {
		if got := r.In(unit); got != want {
			t.Errorf("In(%v B/s) = %q, want %q", float64(unit), got, want)
		}
	}
	if got := r.String(); got != "15.26 MiB/s" {
		t.Errorf("String = %q", got)
	}
}
