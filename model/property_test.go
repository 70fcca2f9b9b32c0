package model

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const tol = 1e-9 // relative, for float sums of up to a few dozen terms

func le(a, b Rate) bool { return float64(a) <= float64(b)*(1+tol) }

func rateGen() *rapid.Generator[Rate] {
	return rapid.Custom(func(t *rapid.T) Rate {
		return Rate(rapid.Float64Range(1, 1e10).Draw(t, "rate"))
	})
}

// maxUnitGroup bounds unit x group in nodeGen; chunks that are multiples of
// it are aligned to every term.
const maxUnitGroup = 1 << 14

// nodeGen draws a node of once-per-block, per-byte and per-unit terms with
// power-of-two units and groups up to maxUnitGroup.
func nodeGen() *rapid.Generator[Node] {
	return rapid.Custom(func(t *rapid.T) Node {
		var terms []Term
		for i, n := 0, rapid.IntRange(1, 4).Draw(t, "terms"); i < n; i++ {
			d := time.Duration(rapid.Int64Range(0, int64(10*time.Millisecond)).Draw(t, "cost"))
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 0:
				terms = append(terms, Once("once", d))
			case 1:
				terms = append(terms, Streaming("stream", rateGen().Draw(t, "rate")))
			default:
				tm := PerUnit("unit", 1<<rapid.IntRange(0, 12).Draw(t, "unit"), d)
				if g := int64(1) << rapid.IntRange(0, 2).Draw(t, "group"); g > 1 {
					tm = tm.OnePer(g)
				}
				terms = append(terms, tm)
			}
		}
		return NewNode("n", terms...)
	})
}

func TestPropSeriesAtMostEveryNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rates := rapid.SliceOfN(rateGen(), 1, 20).Draw(t, "rates")
		s := Series(rates...)
		for _, r := range rates {
			if !le(s, r) {
				t.Fatalf("Series %v > node %v", s, r)
			}
		}
		if p := Pipelined(rates...); !le(s, p) {
			t.Fatalf("Series %v > Pipelined %v", s, p)
		}
	})
}

func TestPropAddingANodeNeverSpeedsUp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rates := rapid.SliceOfN(rateGen(), 0, 20).Draw(t, "rates")
		extra := rateGen().Draw(t, "extra")
		if a, b := Series(append(rates, extra)...), Series(rates...); !le(a, b) {
			t.Fatalf("Series with %v = %v > %v without", extra, a, b)
		}
		c := rapid.SliceOfN(nodeGen(), 0, 6).Draw(t, "cascade")
		n := nodeGen().Draw(t, "node")
		k := rapid.Int64Range(1, 1<<24).Draw(t, "k")
		if a, b := append(Cascade(c), n).Series(k), Cascade(c).Series(k); !le(a, b) {
			t.Fatalf("cascade with one more node = %v > %v", a, b)
		}
	})
}

// A cascade of rate nodes is formula 1 over their rates, at any block size.
func TestPropCascadeOfRatesIsSeries(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rates := rapid.SliceOfN(rateGen(), 1, 10).Draw(t, "rates")
		k := rapid.Int64Range(1, 1<<30).Draw(t, "k")
		var c Cascade
		for _, r := range rates {
			c = append(c, RateNode("r", r))
		}
		for _, pair := range [][2]Rate{{c.Series(k), Series(rates...)}, {c.Pipelined(k), Pipelined(rates...)}} {
			if math.Abs(float64(pair[0]-pair[1])) > tol*float64(pair[1]) {
				t.Fatalf("cascade %v, formula %v", pair[0], pair[1])
			}
		}
	})
}

// Fill-pipelined lies between Series and Pipelined; with chunks aligned to
// every node's unit it never beats full overlap and never loses to series.
func TestPropFillBetween(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cascade(rapid.SliceOfN(nodeGen(), 1, 6).Draw(t, "cascade"))
		k := rapid.Int64Range(1, 1<<24).Draw(t, "k")
		aligned := maxUnitGroup * rapid.Int64Range(1, 64).Draw(t, "chunks")
		any := rapid.Int64Range(1, 1<<20).Draw(t, "any chunk")
		s, p := c.Series(k), c.Pipelined(k)
		f := c.PipelinedFill(k, aligned)
		if !le(s, f) || !le(f, p) {
			t.Fatalf("aligned chunk %d: series %v, fill %v, pipelined %v", aligned, s, f, p)
		}
		if f := c.PipelinedFill(k, any); !le(f, p) {
			t.Fatalf("chunk %d: fill %v > pipelined %v", any, f, p)
		}
		if f := c.PipelinedFill(k, 0); !le(s, f) || !le(f, p) {
			t.Fatalf("cut-through: series %v, fill %v, pipelined %v", s, f, p)
		}
		if f := c.PipelinedFill(k, k); math.Abs(float64(f-s)) > tol*float64(s) {
			t.Fatalf("one chunk: fill %v, series %v", f, s)
		}
	})
}

// For nodes that cost only per byte, fill tends to Pipelined as chunks
// shrink and to Series as they grow, monotonically over chunks dividing k.
func TestPropFillLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c Cascade
		for _, r := range rapid.SliceOfN(rateGen(), 1, 6).Draw(t, "rates") {
			c = append(c, RateNode("r", r))
		}
		const k = 1 << 20
		prev := c.PipelinedFill(k, 1)
		if rel := float64(c.Pipelined(k)-prev) / float64(prev); rel > 6.0/k || rel < -tol {
			t.Fatalf("1-byte chunks: fill %v, pipelined %v", prev, c.Pipelined(k))
		}
		for chunk := int64(2); chunk <= k; chunk *= 2 {
			f := c.PipelinedFill(k, chunk)
			if !le(f, prev) {
				t.Fatalf("chunk %d: fill %v faster than %v with smaller chunks", chunk, f, prev)
			}
			prev = f
		}
	})
}

func TestPropSharesAndAmdahl(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cascade(rapid.SliceOfN(nodeGen(), 1, 6).Draw(t, "cascade"))
		k := rapid.Int64Range(1, 1<<24).Draw(t, "k")
		if c.Seconds(k) == 0 {
			t.Skip("free cascade")
		}
		var sum float64
		sh := c.Shares(k)
		for _, s := range sh {
			sum += s.Fraction
		}
		if math.Abs(sum-1) > tol {
			t.Fatalf("fractions sum to %v", sum)
		}
		b := c.Bottleneck(k)
		if r := c.Pipelined(k); math.Abs(float64(r-b.Rate)) > tol*float64(r) {
			t.Fatalf("bottleneck %v at %v, pipelined %v", b.Name, b.Rate, r)
		}
		p := c.Predict(k)
		for _, pair := range [][2]Rate{{p.Series, c.Series(k)}, {p.Pipelined, c.Pipelined(k)}} {
			if math.Abs(float64(pair[0]-pair[1])) > tol*float64(pair[1]) {
				t.Fatalf("Predict says %v, the method %v", pair[0], pair[1])
			}
		}
		if p.Bottleneck != b {
			t.Fatalf("Predict's bottleneck %v, Bottleneck %v", p.Bottleneck, b)
		}
		i := rapid.IntRange(0, len(c)-1).Draw(t, "node")
		f := rapid.Float64Range(0.1, 100).Draw(t, "factor")
		if got, want := c.SpeedUp(k, i, f), Amdahl(sh[i].Fraction, f); math.Abs(got-want) > 1e-9*want {
			t.Fatalf("speed-up of node %d by %v = %v, Amdahl %v", i, f, got, want)
		}
	})
}

func TestPropFitRecoversAffine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Cost{
			Fixed:     time.Duration(rapid.Int64Range(0, int64(100*time.Millisecond)).Draw(t, "fixed")),
			Bandwidth: Rate(1 / rapid.Float64Range(1e-11, 1e-5).Draw(t, "per byte")),
		}
		sizes := rapid.SliceOfNDistinct(rapid.Int64Range(1, 1<<30), 2, 12, rapid.ID).Draw(t, "sizes")
		var s []Sample
		for _, k := range sizes {
			s = append(s, Sample{k, c.Seconds(k)})
		}
		f, err := FitCost(s)
		if err != nil {
			t.Fatal(err)
		}
		// Errors relative to the largest time, where rounding lives.
		var top float64
		for _, x := range s {
			top = math.Max(top, x.Seconds)
		}
		// Fixed is a Duration: one nanosecond of rounding on top.
		if math.Abs((f.Cost.Fixed-c.Fixed).Seconds()) > 1e-9*top+1e-9 ||
			math.Abs(f.Cost.SecondsPerByte()-c.SecondsPerByte()) > 1e-9*(top+1e-9)/float64(maxOf(sizes)-minOf(sizes)) ||
			f.MaxRel > 1e-6 {
			t.Fatalf("fit %+v of exact %+v", f, c)
		}
	})
}

func maxOf(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func minOf(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}
