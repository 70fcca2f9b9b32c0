package paper

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFigureMatches(t *testing.T) {
	f := Figure{"x", 1.146, 3, "MB/s"}
	for _, tc := range []struct {
		x    float64
		want bool
	}{
		{1.146, true},
		{1.1466, true},  // truncated by the paper
		{1.1455, true},  // rounded
		{1.1471, false}, // a whole unit of the last digit away
		{1.1449, false},
	} {
		if got := f.Matches(tc.x); got != tc.want {
			t.Errorf("Matches(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if got := f.String(); got != "1.146 MB/s" {
		t.Errorf("String = %q", got)
	}
	if got := N3Share.Format(86.6105); got != "86.6" {
		t.Errorf("Format = %q", got)
	}
}

func TestFigure4(t *testing.T) {
	if len(Figure4NBD) != len(Figure4Blocks) || len(Figure4TCP) != len(Figure4Blocks) {
		t.Fatal("Figure 4 series and blocks differ in length")
	}
	if got := len(Samples(Figure4TCP)); got != 4 {
		t.Errorf("raw TCP samples = %d, want the 4 legible points", got)
	}
	want := []float64{2.016, 2.116, 2.216, 2.316, 2.416, 2.516, 2.616, 2.716, 2.816, 2.916}
	if d := cmp.Diff(want, TCP16KCandidates(), cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("candidates: %s", d)
	}
}

// The four legible raw TCP points predict 2.85 MB/s at 16 KB; of the OCR's
// readings 2.x16 only 2.816 is near, and it lies between its neighbours.
func TestReadTCP16K(t *testing.T) {
	got, pred, err := ReadTCP16K()
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got-2.816) > 1e-9 || math.Abs(pred-2.8515) > 1e-4 {
		t.Errorf("ReadTCP16K = %v (predicted %v), want 2.816 (2.8515)", got, pred)
	}
	if !(Figure4TCP[1] < got && got < Figure4TCP[3]) || got <= Figure4NBD[2] {
		t.Errorf("reading %v does not sit between its neighbours above NBD", got)
	}
}

// NBD's per-request overhead over raw TCP from the fits of Figure 4.
func TestNBDOverhead(t *testing.T) {
	tcp, err := FitTCP()
	if err != nil {
		t.Fatal(err)
	}
	nbd, err := FitNBD()
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %.4f, want %.4f", what, got, want)
		}
	}
	near("TCP fixed (us)", float64(tcp.Cost.Fixed)/1e3, 680.7, 0.05)
	near("TCP per byte (ns)", tcp.Cost.SecondsPerByte()*1e9, 292.893, 5e-4)
	near("TCP worst point (%)", tcp.MaxRel*100, 7.73, 0.01)
	near("NBD fixed (us)", float64(nbd.Cost.Fixed)/1e3, 1660.6, 0.05)
	near("NBD per byte (ns)", nbd.Cost.SecondsPerByte()*1e9, 282.292, 5e-4)
	near("NBD worst point (%)", nbd.MaxRel*100, 1.46, 0.01)
	d := nbd.Cost.Sub(tcp.Cost)
	near("overhead fixed (us)", float64(d.Fixed)/1e3, 979.9, 0.05)
	near("overhead per byte (ns)", d.SecondsPerByte()*1e9, -10.601, 5e-4)
}
