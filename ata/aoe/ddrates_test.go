package aoe_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ddDir is the direction of one guest dd run.
type ddDir int

const (
	ddWrite ddDir = iota
	ddRead
)

func (d ddDir) String() string { return [...]string{"write", "read"}[d] }

// ddRates collects the guest's dd rates per target and direction, and
// logs their medians side by side. Rates are only ever logged, never
// asserted: the machine running the test may be shared.
type ddRates struct {
	mu      sync.Mutex
	samples map[string]*[2][]float64 // target -> MB/s per direction
	order   []string
}

// ddLine matches the summary dd prints: "N bytes (...) copied, S s, R".
var ddLine = regexp.MustCompile(`(?m)^([0-9]+) bytes .*copied, ([0-9.]+) s,`)

// parseDD returns the rate of dd's summary in out, in MB/s (10^6 bytes
// per second), from the byte count and the seconds, which dd prints with
// more digits than its rounded rate.
func parseDD(out string) (float64, error) {
	m := ddLine.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no dd summary in %q", out)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseFloat(m[2], 64)
	if err != nil || s <= 0 {
		return 0, fmt.Errorf("dd time %q", m[2])
	}
	return n / s / 1e6, nil
}

// median returns the median of xs (the mean of the middle two for an
// even count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// record returns a Step.Check that adds the rate of the step's dd output
// to target's samples in direction dir.
func (r *ddRates) record(target string, dir ddDir) func(*testing.T, string) {
	return func(t *testing.T, out string) {
		rate, err := parseDD(out)
		if err != nil {
			t.Error(err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.samples == nil {
			r.samples = map[string]*[2][]float64{}
		}
		s, ok := r.samples[target]
		if !ok {
			s = new([2][]float64)
			r.samples[target] = s
			r.order = append(r.order, target)
		}
		s[dir] = append(s[dir], rate)
	}
}

// table formats each target's median rates and sample counts, the ratio
// of every later target's medians to the first target's, and the median
// of their ratios round by round (the i-th samples of two targets were
// taken one after the other, so the guest's drift over a run, which
// spreads a target's samples, cancels out of each round's ratio).
func (r *ddRates) table(what string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s (medians in MB/s; a TCG guest, compare columns within a run only):\n", what)
	fmt.Fprintf(&b, "%-12s %8s %8s  %s\n", "target", "write", "read", "samples write / read")
	for _, k := range r.order {
		s := r.samples[k]
		fmt.Fprintf(&b, "%-12s %8.1f %8.1f  %s / %s\n", k, median(s[ddWrite]), median(s[ddRead]),
			formatRates(s[ddWrite]), formatRates(s[ddRead]))
	}
	if len(r.order) < 2 {
		return b.String()
	}
	base := r.samples[r.order[0]]
	for _, k := range r.order[1:] {
		s := r.samples[k]
		fmt.Fprintf(&b, "%-12s %8.2f %8.2f  (%s / %s)\n", "ratio", ratio(s[ddWrite], base[ddWrite]),
			ratio(s[ddRead], base[ddRead]), k, r.order[0])
		fmt.Fprintf(&b, "%-12s %8.2f %8.2f  (median of %s / %s in each round)\n", "per round",
			roundRatio(s[ddWrite], base[ddWrite]), roundRatio(s[ddRead], base[ddRead]), k, r.order[0])
	}
	return b.String()
}

// roundRatio returns the median of a[i] / b[i] over the rounds both have.
func roundRatio(a, b []float64) float64 {
	var q []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			q = append(q, a[i]/b[i])
		}
	}
	return median(q)
}

func ratio(a, b []float64) float64 {
	if median(b) == 0 {
		return 0
	}
	return median(a) / median(b)
}

func formatRates(xs []float64) string {
	f := make([]string, len(xs))
	for i, x := range xs {
		f[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(f, " ")
}

func TestParseDD(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64
		bad       bool
	}{
		{name: "MB/s", out: "67108864 bytes (67 MB, 64 MiB) copied, 1.34218 s, 50.0 MB/s\n", want: 67108864 / 1.34218 / 1e6},
		{name: "kB/s", out: "garbage\n1024 bytes (1.0 kB, 1.0 KiB) copied, 0.5 s, 2.0 kB/s\n", want: 1024 / 0.5 / 1e6},
		{name: "no summary", out: "dd: error writing '/dev/etherd/e0.4': Input/output error\n", bad: true},
		{name: "zero time", out: "0 bytes copied, 0 s, 0 kB/s\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDD(tc.out)
			if tc.bad {
				if err == nil {
					t.Fatalf("parseDD = %v, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseDD = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestDDRatesTable(t *testing.T) {
	var r ddRates
	out := func(mbps float64) string {
		return fmt.Sprintf("%d bytes (10 MB, 9.5 MiB) copied, 1 s, x\n", int(mbps*1e6))
	}
	for _, s := range []struct {
		target string
		dir    ddDir
		mbps   float64
	}{
		{"vblade", ddWrite, 40}, {"nhd", ddWrite, 50}, {"vblade", ddRead, 30}, {"nhd", ddRead, 30},
		{"nhd", ddWrite, 70}, {"vblade", ddWrite, 60}, {"nhd", ddRead, 15}, {"vblade", ddRead, 20},
		{"vblade", ddWrite, 50}, {"nhd", ddWrite, 60}, {"vblade", ddRead, 25}, {"nhd", ddRead, 45},
	} {
		r.record(s.target, s.dir)(t, out(s.mbps))
	}
	want := `dd (medians in MB/s; a TCG guest, compare columns within a run only):
target          write     read  samples write / read
vblade           50.0     25.0  40.0 60.0 50.0 / 30.0 20.0 25.0
nhd              60.0     30.0  50.0 70.0 60.0 / 30.0 15.0 45.0
ratio            1.20     1.20  (nhd / vblade)
per round        1.20     1.00  (median of nhd / vblade in each round)
`
	if diff := cmp.Diff(want, r.table("dd")); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
