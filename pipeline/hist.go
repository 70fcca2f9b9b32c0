package pipeline

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear: values below 2^histSub nanoseconds get a
// bucket each, and every power of two above is cut into 2^histSub equal
// buckets. A bucket is never wider than 1/2^histSub of its lower bound, so a
// quantile read from the buckets is within 1/32 (3.1%) of the exact one.
const (
	histSub     = 5
	histSubN    = 1 << histSub
	histBuckets = (64 - histSub) * histSubN // covers every non-negative int64
)

// Histogram records durations in log-linear buckets of relative width at
// most 1/32 and answers quantiles from them (p50, p99, p99.9).
//
// Record never allocates and costs a few nanoseconds; the zero Histogram is
// empty and ready to use. A Histogram is thread-compatible: one goroutine
// may Record at a time, and reading it while another goroutine records is a
// data race (the pipeline reads its histograms only after Run returns).
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      uint64 // nanoseconds, saturating
	min, max int64
}

// histIndex returns the bucket of v >= 0.
func histIndex(v uint64) int {
	if v < histSubN {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1)), e >= histSub
	shift := e - histSub
	return (shift+1)<<histSub + int(v>>shift) - histSubN
}

// histBounds returns the smallest value of bucket i and the bucket's width.
func histBounds(i int) (lo, width uint64) {
	if i < histSubN {
		return uint64(i), 1
	}
	shift := i>>histSub - 1
	m := uint64(i&(histSubN-1)) + histSubN
	return m << shift, 1 << shift
}

// Record adds one duration; a negative d counts as 0.
func (h *Histogram) Record(d time.Duration) { h.record(int64(d)) }

func (h *Histogram) record(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(uint64(v))]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	s := h.sum + uint64(v)
	if s < h.sum {
		s = math.MaxUint64
	}
	h.sum = s
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest recorded duration, 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest recorded duration, 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean returns the mean of the recorded durations, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the duration at quantile q in [0, 1]: the recorded value
// of rank ceil(q·Count) (at least 1) in sorted order, read from its bucket,
// so within 1/32 of it, and never outside [Min, Max]. An empty histogram
// gives 0; q outside [0, 1] is clamped.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	switch {
	case !(q > 0): // also NaN
		return time.Duration(h.min)
	case q >= 1:
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i]
		if seen < rank {
			continue
		}
		lo, w := histBounds(i)
		v := int64(lo + (w-1)/2) // the middle of the bucket
		if v < h.min {
			v = h.min
		}
		if v > h.max {
			v = h.max
		}
		return time.Duration(v)
	}
	return time.Duration(h.max) // not reached: the counts sum to n
}

// Merge adds the durations recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	s := h.sum + o.sum
	if s < h.sum {
		s = math.MaxUint64
	}
	h.sum = s
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Latency is a summary of a Histogram: what a report prints.
type Latency struct {
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	Min   time.Duration `json:"min_ns"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summary returns h's count, mean, extremes and p50/p99/p99.9.
func (h *Histogram) Summary() Latency {
	return Latency{
		Count: h.n,
		Mean:  h.Mean(),
		Min:   h.Min(),
		P50:   h.Quantile(0.50),
		P99:   h.Quantile(0.99),
		P999:  h.Quantile(0.999),
		Max:   h.Max(),
	}
}
