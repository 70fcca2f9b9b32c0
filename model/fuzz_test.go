package model

import (
	"errors"
	"math"
	"testing"
)

// FuzzFitCost feeds three samples of any values to FitCost: it must return
// one of its errors or a fit whose numbers hang together, never panic.
func FuzzFitCost(f *testing.F) {
	f.Add(int64(4096), 1.7e-3, int64(8192), 3.2e-3, int64(65536), 19.9e-3)
	f.Add(int64(1), 1e-9, int64(1<<40), 1e3, int64(2), 2e-9)
	f.Add(int64(512), 1.0, int64(512), 2.0, int64(512), 3.0)
	f.Add(int64(-1), 1.0, int64(0), 0.0, int64(3), math.NaN())
	f.Fuzz(func(t *testing.T, b1 int64, t1 float64, b2 int64, t2 float64, b3 int64, t3 float64) {
		s := []Sample{{b1, t1}, {b2, t2}, {b3, t3}}
		fit, err := FitCost(s)
		switch {
		case errors.Is(err, ErrNonPhysical): // the fit comes with the error, in full
			if fit.Cost.Check() == nil {
				t.Fatalf("%v for a physical cost %v", err, fit.Cost)
			}
		case err != nil:
			if !errors.Is(err, ErrBadSample) && !errors.Is(err, ErrTooFewSamples) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		case fit.Cost.Check() != nil:
			t.Fatalf("no error for the non-physical fit %v", fit.Cost)
		}
		if fit.N != 3 || len(fit.Residuals) != 3 || !(fit.RMS >= 0) || !(fit.MaxRel >= 0) || fit.R2 > 1+1e-9 {
			t.Fatalf("inconsistent fit %+v", fit)
		}
		var sum, top float64
		for i, r := range fit.Residuals {
			sum += r
			top = math.Max(top, s[i].Seconds)
		}
		if math.IsInf(top, 0) || top > 1e9 {
			return // beyond a Duration's range, Fixed saturates; nothing to check
		}
		if math.Abs(sum) > 1e-6*top+3*0.5e-9 { // Fixed is rounded to the nanosecond
			t.Fatalf("residuals sum to %v (largest time %v)", sum, top)
		}
	})
}
