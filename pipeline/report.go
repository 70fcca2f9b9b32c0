package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nhdkit/nhd/model"
)

// Report is what a run did, stage by stage, and what the cascade model
// makes of it. Rates are in bytes per second when the units have a size
// (Line.Size), otherwise in units per second (RateUnit says which); a rate
// the clock could not measure (a stage of no measurable time) reads 0.
//
// The model takes each stage's measured time per unit, t_i = Busy/Units, as
// a node of the cascade. The stages take turns on each unit, so they are
// in series and their times add up (the paper's formula 1): Predicted is
// that rate, Measured what the sink saw over the wall time of the run, and
// ModelError compares them. Pipelined is what the same stages would reach
// each on a processor of its own, working at once on successive units:
// the slowest stage's rate.
type Report struct {
	Pipeline     string        `json:"pipeline"`      // the stages, as Pipeline.String
	Instrumented bool          `json:"instrumented"`  // whether timing was on
	Err          string        `json:"error"`         // the run's error, "" after a complete run
	Wall         time.Duration `json:"wall_ns"`       // the run's duration
	CPU          time.Duration `json:"cpu_ns"`        // processor time the whole process used meanwhile (instrumented, Unix)
	Units        uint64        `json:"units"`         // units the sink consumed
	Bytes        uint64        `json:"bytes"`         // their bytes, 0 without a size
	RateUnit     string        `json:"rate_unit"`     // "B/s" or "units/s"
	UnitBytes    float64       `json:"unit_bytes"`    // mean bytes per unit the model uses (1 without sizes)
	Measured     model.Rate    `json:"measured"`      // end to end, over Wall
	Predicted    model.Rate    `json:"predicted"`     // the model: the stages in series
	ModelError   float64       `json:"model_error"`   // (Predicted-Measured)/Measured
	Pipelined    model.Rate    `json:"pipelined"`     // the model with the stages overlapped, no fill
	Bottleneck   string        `json:"bottleneck"`    // the stage with the longest time per unit
	BottleneckAt int           `json:"bottleneck_at"` // its index, -1 when not instrumented
	Share        float64       `json:"share"`         // its part of the series time per unit, in [0, 1]
	Latency      Latency       `json:"latency"`       // end to end per unit: source start to sink done
	Stages       []StageReport `json:"stages"`
}

// StageReport is one stage's part of a run.
type StageReport struct {
	Name    string        `json:"name"`
	Index   int           `json:"index"`
	State   State         `json:"state"`
	Err     string        `json:"error"` // its own error when it failed
	Units   uint64        `json:"units"` // units it completed
	Bytes   uint64        `json:"bytes"` // their bytes (its output; the sink's input)
	Busy    time.Duration `json:"busy_ns"`
	PerUnit time.Duration `json:"per_unit_ns"` // Busy/Units
	Rate    model.Rate    `json:"rate"`        // UnitBytes/PerUnit: its rate on its own
	Share   float64       `json:"share"`       // its part of the series time per unit
	Latency Latency       `json:"latency"`     // per unit in the stage
}

// Stage returns the report of the stage named name (the first, if several
// share it).
func (r *Report) Stage(name string) (StageReport, bool) {
	for _, s := range r.Stages {
		if s.Name == name {
			return s, true
		}
	}
	return StageReport{}, false
}

// report builds the Report of the run that just ended.
func (p *Pipeline) report(wall time.Duration, err error) Report {
	r := Report{
		Pipeline:     p.String(),
		Instrumented: p.Instrument,
		Wall:         wall,
		BottleneckAt: -1,
		RateUnit:     "units/s",
		UnitBytes:    1,
		Stages:       make([]StageReport, len(p.nodes)),
	}
	if err != nil {
		r.Err = err.Error()
	}
	sink := p.nodes[len(p.nodes)-1]
	r.Units = sink.units
	for i, n := range p.nodes {
		s := StageReport{Name: n.name, Index: i, State: n.state, Units: n.units}
		if n.err != nil {
			s.Err = n.err.Err.Error()
		}
		if st := n.stats; st != nil {
			s.Bytes = st.bytes
			s.Busy = time.Duration(st.busy)
			s.Latency = st.hist.Summary()
			if n.units > 0 {
				s.PerUnit = time.Duration(st.busy / int64(n.units))
			}
		}
		r.Stages[i] = s
	}
	// The payload per unit: the sink's, or the nearest sized stage's.
	for i := len(r.Stages) - 1; i >= 0; i-- {
		s := r.Stages[i]
		if s.Bytes > 0 && s.Units > 0 {
			r.UnitBytes = float64(s.Bytes) / float64(s.Units)
			r.RateUnit = "B/s"
			break
		}
	}
	if r.RateUnit == "B/s" {
		r.Bytes = r.Stages[len(r.Stages)-1].Bytes
		if r.Bytes == 0 {
			r.Bytes = uint64(math.Round(r.UnitBytes * float64(r.Units)))
		}
	}
	if wall > 0 {
		r.Measured = model.Rate(r.UnitBytes * float64(r.Units) / wall.Seconds())
	}
	if !p.Instrument {
		return r
	}
	r.Latency = p.e2e.Summary()
	p.predict(&r)
	return r
}

// predict fills in the model's side of r.
func (p *Pipeline) predict(r *Report) {
	k := max(int64(math.Round(r.UnitBytes)), 1)
	scale := model.Rate(r.UnitBytes / float64(k)) // k is rounded; rates use the exact mean
	var all model.Cascade
	for _, s := range r.Stages {
		d := s.PerUnit
		if s.Units == 0 {
			d = s.Busy // a stage that failed on its first unit
		}
		all = append(all, model.NewNode(s.Name, model.PerUnit(s.Name, k, d)))
	}
	pred := all.Predict(k)
	for i, sh := range pred.Shares {
		r.Stages[i].Share = sh.Fraction
		r.Stages[i].Rate = finite(sh.Rate * scale)
	}
	if pred.Bottleneck.Index >= 0 {
		r.Bottleneck = pred.Bottleneck.Name
		r.BottleneckAt = pred.Bottleneck.Index
		r.Share = pred.Bottleneck.Fraction
	}
	// JSON has no infinity: a pipeline too fast for the clock reads 0.
	r.Predicted, r.Pipelined = finite(pred.Series*scale), finite(pred.Pipelined*scale)
	if r.Units > 0 && r.Measured > 0 && r.Predicted > 0 {
		r.ModelError = float64(r.Predicted-r.Measured) / float64(r.Measured)
	}
}

func finite(r model.Rate) model.Rate {
	if math.IsInf(float64(r), 0) || math.IsNaN(float64(r)) {
		return 0
	}
	return r
}

// rateText formats a rate in the report's unit.
func (r *Report) rateText(v model.Rate) string {
	if r.RateUnit == "B/s" {
		return fmt.Sprintf("%.4g MiB/s", v.MiBps())
	}
	return fmt.Sprintf("%.4g units/s", float64(v))
}

// WriteTable writes r as a table, one line per stage, and the model's
// prediction beside the measured rate.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline: %s\n", r.Pipeline)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	if r.Instrumented {
		fmt.Fprintln(tw, "stage\tstate\tunits\tbytes\tbusy\tper unit\trate\tshare\tp50\tp99\tp99.9\t")
	} else {
		fmt.Fprintln(tw, "stage\tstate\tunits\t")
	}
	for _, s := range r.Stages {
		if !r.Instrumented {
			fmt.Fprintf(tw, "%s\t%v\t%d\t\n", s.Name, s.State, s.Units)
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s\t\n",
			s.Name, s.State, s.Units, s.Bytes, dur(s.Busy), dur(s.PerUnit),
			r.rateText(s.Rate), 100*s.Share, dur(s.Latency.P50), dur(s.Latency.P99), dur(s.Latency.P999))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "end to end: %d units", r.Units)
	if r.RateUnit == "B/s" {
		fmt.Fprintf(&b, ", %d bytes", r.Bytes)
	}
	fmt.Fprintf(&b, " in %s: measured %s", dur(r.Wall), r.rateText(r.Measured))
	if r.CPU > 0 && r.Wall > 0 {
		fmt.Fprintf(&b, " (process CPU %s, %.2f cores busy)", dur(r.CPU), r.CPU.Seconds()/r.Wall.Seconds())
	}
	b.WriteString("\n")
	if r.Instrumented {
		fmt.Fprintf(&b, "model: series %s, error %+.1f%% (pipelined %s)\n",
			r.rateText(r.Predicted), 100*r.ModelError, r.rateText(r.Pipelined))
		if r.BottleneckAt >= 0 {
			fmt.Fprintf(&b, "bottleneck: %s, %.1f%% of the time per unit\n", r.Bottleneck, 100*r.Share)
		}
		l := r.Latency
		fmt.Fprintf(&b, "latency end to end: p50 %s, p99 %s, p99.9 %s, max %s\n",
			dur(l.P50), dur(l.P99), dur(l.P999), dur(l.Max))
	}
	if r.Err != "" {
		fmt.Fprintf(&b, "error: %s\n", r.Err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String returns the table WriteTable writes.
func (r Report) String() string {
	var b strings.Builder
	_ = r.WriteTable(&b)
	return b.String()
}

// JSON returns r as indented JSON: durations in nanoseconds, rates in
// RateUnit, "->" unescaped.
func (r *Report) JSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// dur formats d with three significant digits: "12.3µs", "1.05s".
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", int64(d))
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}
