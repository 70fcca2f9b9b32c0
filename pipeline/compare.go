package pipeline

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Variant names the Report of one configuration of a datapath (per-sector
// or streaming, copying or zero-copy, series or pipelined), for a
// comparison.
type Variant struct {
	Name   string `json:"name"`
	Report Report `json:"report"`
}

// WriteComparison writes one row per variant, like the paper's Table 4:
// each stage's rate on its own (a column per stage name, in order of first
// appearance), the model's prediction, the measured rate, the model's error
// and the measured speed-up over the first variant. Rates print in MiB/s
// when the reports count bytes, else in units/s; a stage a variant lacks
// prints "-".
func WriteComparison(w io.Writer, vs []Variant) error {
	var names []string
	for _, v := range vs {
		for _, s := range v.Report.Stages {
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	unit := "units/s"
	if len(vs) > 0 && vs[0].Report.RateUnit == "B/s" {
		unit = "MiB/s"
	}
	fmt.Fprintf(tw, "variant (%s)\t%s\tmodel\tmeasured\terror\tspeed-up\t\n", unit, strings.Join(names, "\t"))
	var base float64
	for i, v := range vs {
		r := &v.Report
		num := func(x float64) string {
			if r.RateUnit == "B/s" {
				x /= 1 << 20
			}
			return fmt.Sprintf("%.4g", x)
		}
		fmt.Fprintf(tw, "%s\t", v.Name)
		for _, n := range names {
			j := slices.IndexFunc(r.Stages, func(s StageReport) bool { return s.Name == n })
			if j < 0 || !r.Instrumented {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t", num(float64(r.Stages[j].Rate)))
		}
		measured := float64(r.Measured)
		if i == 0 {
			base = measured
		}
		speedup := "-"
		if base > 0 {
			speedup = fmt.Sprintf("%.2fx", measured/base)
		}
		if r.Instrumented {
			fmt.Fprintf(tw, "%s\t%s\t%+.1f%%\t%s\t\n", num(float64(r.Predicted)), num(measured), 100*r.ModelError, speedup)
		} else {
			fmt.Fprintf(tw, "-\t%s\t-\t%s\t\n", num(measured), speedup)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}
