package pipeline

import (
	"encoding/binary"
	"math"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/allocs"
	"pgregory.net/rapid"
)

// genDuration draws durations over the whole range, small ones often.
func genDuration() *rapid.Generator[int64] {
	return rapid.OneOf(
		rapid.Int64Range(0, 100),
		rapid.Int64Range(0, 1e6),
		rapid.Int64Range(0, 1e12),
		rapid.Int64Range(0, math.MaxInt64),
		rapid.Custom(func(t *rapid.T) int64 { // powers of two and their neighbours
			e := rapid.IntRange(0, 62).Draw(t, "e")
			return int64(1)<<e + rapid.Int64Range(-1, 1).Draw(t, "d")
		}),
	)
}

func TestHistBuckets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := uint64(max(genDuration().Draw(t, "v"), 0))
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("index %d out of range", i)
		}
		lo, w := histBounds(i)
		if v < lo || v-lo >= w {
			t.Fatalf("v %d not in bucket %d [%d, %d+%d)", v, i, lo, lo, w)
		}
		if w > 1 && w > lo>>histSub {
			t.Fatalf("bucket %d at %d is %d wide, more than 1/%d", i, lo, w, histSubN)
		}
		if v > 0 && histIndex(v-1) > i {
			t.Fatalf("index not monotonic at %d", v)
		}
		if i > 0 {
			plo, pw := histBounds(i - 1)
			if plo+pw != lo {
				t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i-1, plo+pw, i, lo)
			}
		}
	})
	if got := histIndex(math.MaxInt64); got != histBuckets-1 {
		t.Errorf("MaxInt64 in bucket %d, want the last, %d", got, histBuckets-1)
	}
	if got := histIndex(math.MaxUint64); got != histBuckets+histSubN-1 {
		// uint64 values above MaxInt64 never reach record; the formula
		// would go one octave past the array.
		t.Errorf("MaxUint64 index %d", got)
	}
}

// TestHistQuantiles checks quantiles against a sorted slice of the same
// values: each answer lies in the bucket of the exact order statistic, so
// within 1/32 of it.
func TestHistQuantiles(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(genDuration(), 1, 400).Draw(t, "values")
		var h Histogram
		for _, v := range vals {
			h.Record(time.Duration(v))
		}
		sorted := slices.Clone(vals)
		slices.Sort(sorted)
		n := len(sorted)
		if h.Count() != uint64(n) || int64(h.Min()) != sorted[0] || int64(h.Max()) != sorted[n-1] {
			t.Fatalf("count %d min %d max %d, want %d %d %d", h.Count(), h.Min(), h.Max(), n, sorted[0], sorted[n-1])
		}
		var sum big.Int
		for _, v := range vals {
			sum.Add(&sum, big.NewInt(v))
		}
		if sum.IsUint64() {
			if want := int64(sum.Uint64() / uint64(n)); int64(h.Mean()) != want {
				t.Fatalf("mean %d, want %d", h.Mean(), want)
			}
		}
		qs := []float64{0, 0.5, 0.9, 0.99, 0.999, 1, rapid.Float64Range(0, 1).Draw(t, "q")}
		for _, q := range qs {
			rank := int(math.Ceil(q * float64(n)))
			rank = min(max(rank, 1), n)
			exact := sorted[rank-1]
			got := int64(h.Quantile(q))
			if histIndex(uint64(got)) != histIndex(uint64(exact)) {
				t.Fatalf("q %v: %d, exact %d, in another bucket", q, got, exact)
			}
			if d := math.Abs(float64(got) - float64(exact)); d > float64(exact)/histSubN {
				t.Fatalf("q %v: %d, exact %d, off by more than 1/%d", q, got, exact, histSubN)
			}
			if got < sorted[0] || got > sorted[n-1] {
				t.Fatalf("q %v: %d outside [%d, %d]", q, got, sorted[0], sorted[n-1])
			}
		}
	})
}

func TestHistMerge(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.SliceOf(genDuration()).Draw(t, "a")
		b := rapid.SliceOf(genDuration()).Draw(t, "b")
		var ha, hb, hall Histogram
		for _, v := range a {
			ha.record(v)
			hall.record(v)
		}
		for _, v := range b {
			hb.record(v)
			hall.record(v)
		}
		ha.Merge(&hb)
		if diff := cmp.Diff(hall.Summary(), ha.Summary()); diff != "" {
			t.Fatalf("merged summary (-all +merged):\n%s", diff)
		}
		if ha.counts != hall.counts {
			t.Fatal("merged counts differ")
		}
	})
}

func TestHistEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Summary() != (Latency{}) {
		t.Errorf("empty histogram: %+v", h.Summary())
	}
	h.Record(-5 * time.Second) // counts as 0
	h.Record(math.MaxInt64)
	h.Record(math.MaxInt64)
	h.Record(math.MaxInt64) // the sum saturates
	if h.Min() != 0 || h.Max() != math.MaxInt64 || h.Count() != 4 {
		t.Errorf("got %+v", h.Summary())
	}
	if h.Quantile(math.NaN()) != 0 || h.Quantile(-1) != 0 || h.Quantile(2) != math.MaxInt64 {
		t.Errorf("clamped quantiles: %v %v %v", h.Quantile(math.NaN()), h.Quantile(-1), h.Quantile(2))
	}
	if h.Mean() != time.Duration(uint64(math.MaxUint64)/4) {
		t.Errorf("saturated mean %v", h.Mean())
	}
	h.Reset()
	if h.Count() != 0 {
		t.Error("Reset left values")
	}
}

func TestHistRecordAllocs(t *testing.T) {
	var h Histogram
	if n := allocs.PerRun(1000, func() { h.Record(1234567) }); n > allocs.Slack {
		t.Errorf("Record allocates %v times", n)
	}
}

func BenchmarkHistRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	v := time.Duration(1)
	for b.Loop() {
		h.Record(v)
		v = v*7 + 13&0xffffff
	}
}

// FuzzHistogram records the int64 values in the input (8 bytes each,
// little-endian; negative ones count as 0) and checks every quantile it is
// asked for against the sorted values.
func FuzzHistogram(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0}, 0.5)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0}, 0.999)
	f.Fuzz(func(t *testing.T, data []byte, q float64) {
		var h Histogram
		var vals []int64
		for len(data) >= 8 {
			v := int64(binary.LittleEndian.Uint64(data))
			data = data[8:]
			h.Record(time.Duration(v))
			vals = append(vals, max(v, 0))
		}
		if len(vals) == 0 {
			if h.Quantile(q) != 0 || h.Count() != 0 {
				t.Fatal("empty histogram answers")
			}
			return
		}
		slices.Sort(vals)
		if math.IsNaN(q) {
			q = 0
		}
		q = min(max(q, 0), 1)
		rank := min(max(int(math.Ceil(q*float64(len(vals)))), 1), len(vals))
		if q == 0 {
			rank = 1
		}
		exact := vals[rank-1]
		got := int64(h.Quantile(q))
		if histIndex(uint64(got)) != histIndex(uint64(exact)) {
			t.Fatalf("q %v: %d, exact %d, in another bucket", q, got, exact)
		}
	})
}
