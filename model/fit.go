package model

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrTooFewSamples is returned by FitCost when the samples do not hold at
// least two different block sizes, so no line is defined.
var ErrTooFewSamples = errors.New("model: fit needs samples of at least two block sizes")

// ErrBadSample is returned (wrapped, with the sample's index) by FitCost for
// a sample whose block size is not positive or whose time is not a positive
// finite number.
var ErrBadSample = errors.New("model: bad sample")

// Sample is one measurement of a node: a block of Bytes bytes took Seconds.
type Sample struct {
	Bytes   int64
	Seconds float64
}

// SampleOf returns the sample of a block of n bytes that took d.
func SampleOf(n int64, d time.Duration) Sample { return Sample{n, d.Seconds()} }

// RateSample returns the sample of a block of n bytes moved at rate r (the
// form bandwidth plots such as the paper's Figure 4 give).
func RateSample(n int64, r Rate) Sample { return Sample{n, r.Seconds(n)} }

// Fit is a least-squares fit of a node's affine cost to samples.
type Fit struct {
	Cost Cost // the fitted fixed and per-byte cost
	N    int  // number of samples
	// Residuals are measured minus fitted times, in seconds, in sample order.
	Residuals []float64
	// RMS is the root-mean-square residual in seconds.
	RMS float64
	// MaxRel is the largest |residual| over its measured time: how far the
	// line is from the worst sample, relatively (rates err by about as much).
	MaxRel float64
	// R2 is the coefficient of determination, 1 for a perfect line.
	R2 float64
}

// FitCost fits a Cost (Fixed plus bytes at Bandwidth) to samples by
// ordinary least squares on time against block size, and reports how well
// the line fits. It returns an error wrapping ErrBadSample for a sample
// with Bytes <= 0 or a time that is not positive and finite, and
// ErrTooFewSamples unless there are two distinct block sizes.
//
// When the best line is not a physical cost (a negative Fixed: the samples
// are not affine at the small end; or a negative slope, so a negative
// Bandwidth: bigger blocks took less time), FitCost returns the Fit in
// full together with an error wrapping ErrNonPhysical that names the part:
// a caller may still report the line and its residuals, but must not take
// it for a node's cost (NewCostNode refuses it).
func FitCost(samples []Sample) (Fit, error) {
	n := len(samples)
	var xs, ys float64 // scales: the largest size and time
	for i, s := range samples {
		if s.Bytes <= 0 || !(s.Seconds > 0) || math.IsInf(s.Seconds, 1) {
			return Fit{}, fmt.Errorf("%w %d: %d bytes in %v s", ErrBadSample, i, s.Bytes, s.Seconds)
		}
		xs = math.Max(xs, float64(s.Bytes))
		ys = math.Max(ys, s.Seconds)
	}
	if n < 2 {
		return Fit{}, ErrTooFewSamples
	}
	// Work on sizes and times scaled into (0, 1] and centred, so that no
	// sum overflows or loses the small end to rounding.
	var mx, my float64
	for _, s := range samples {
		mx += float64(s.Bytes) / xs
		my += s.Seconds / ys
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy float64
	for _, s := range samples {
		dx, dy := float64(s.Bytes)/xs-mx, s.Seconds/ys-my
		sxx += dx * dx
		sxy += dx * dy
	}
	if sxx == 0 {
		return Fit{}, ErrTooFewSamples
	}
	// A part within rounding of zero is zero: exact data of a free fixed
	// part must not come out non-physical by an ulp.
	const eps = 1e-12
	slope, fixed := sxy/sxx, my-sxy/sxx*mx
	if fixed < 0 && fixed > -eps {
		fixed = 0
	}
	if slope < 0 && slope > -eps {
		slope = 0
	}
	c := Cost{Fixed: seconds(fixed * ys), Bandwidth: Rate(xs / (slope * ys))}
	return assessPhysical(samples, c)
}

// FitFixed fits only the fixed part to samples, the bytes held to move at
// bandwidth: Fixed is the mean of Seconds - Bytes/bandwidth. It answers
// "what does this node add per request to that one" when both move bytes
// at the same pace (NBD over raw TCP). Errors as for FitCost, except that
// one sample is enough; a bandwidth not above 0 is ErrNonPhysical.
func FitFixed(samples []Sample, bandwidth Rate) (Fit, error) {
	if !(bandwidth > 0) {
		return Fit{}, fmt.Errorf("%w: FitFixed at bandwidth %v", ErrNonPhysical, bandwidth)
	}
	perByte := 1 / float64(bandwidth)
	var sum float64
	for i, s := range samples {
		if s.Bytes <= 0 || !(s.Seconds > 0) || math.IsInf(s.Seconds, 1) {
			return Fit{}, fmt.Errorf("%w %d: %d bytes in %v s", ErrBadSample, i, s.Bytes, s.Seconds)
		}
		sum += s.Seconds - perByte*float64(s.Bytes)
	}
	if len(samples) == 0 {
		return Fit{}, ErrTooFewSamples
	}
	return assessPhysical(samples, Cost{Fixed: seconds(sum / float64(len(samples))), Bandwidth: bandwidth})
}

// assessPhysical is assess, with an error wrapping ErrNonPhysical when c
// is not a physical cost.
func assessPhysical(samples []Sample, c Cost) (Fit, error) {
	f := assess(samples, c)
	if err := c.Check(); err != nil {
		return f, fmt.Errorf("%w (fitted line %v)", err, c)
	}
	return f, nil
}

// assess fills in a Fit of c to samples, its sums taken on times scaled by
// the largest so that they cannot overflow.
func assess(samples []Sample, c Cost) Fit {
	n := len(samples)
	f := Fit{Cost: c, N: n, Residuals: make([]float64, n)}
	var ys, my float64
	for _, s := range samples {
		ys = math.Max(ys, s.Seconds)
	}
	for _, s := range samples {
		my += s.Seconds / ys
	}
	my /= float64(n)
	var sse, syy float64
	for i, s := range samples {
		r := s.Seconds - c.Seconds(s.Bytes)
		f.Residuals[i] = r
		sse += (r / ys) * (r / ys)
		syy += (s.Seconds/ys - my) * (s.Seconds/ys - my)
		f.MaxRel = math.Max(f.MaxRel, math.Abs(r)/s.Seconds)
	}
	f.RMS = ys * math.Sqrt(sse/float64(n))
	f.R2 = 1
	if syy > 0 {
		f.R2 = 1 - sse/syy
	}
	return f
}
