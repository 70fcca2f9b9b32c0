package bridge

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nhdkit/nhd/internal/size"
	"github.com/nhdkit/nhd/model"
)

// WriteText writes t as the paper's Table 4: a line per row and
// direction (front end, back end, model, measured, error, speed-up) in
// the paper's MB/s (2^20 bytes per second), then a summary line per
// direction, the cost per extra request of pipelining in chunks, and the
// model's worst error. Its wording names the backend an NBD client, the
// one Table 4 measures.
func (t *Measurement) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Table 4 on this machine: %s sequential READ/WRITE DMA EXT, MB/s = 2^20 B/s, medians of %d commands each\n", size.Text(int64(t.BlockSize)), t.Commands)
	fmt.Fprintln(&b, "(front end: host + ATA + DMA over an in-cache memory disk, the disk's calls taken out; back end: the bare NBD client making the bridge's NBD requests;")
	fmt.Fprintf(&b, " model: series 1/V = 1/V_front + 1/V_back, fill = one command streamed through both in chunks;\n  across commands the back end is the bare client with %d requests in flight, as the bridge keeps them, in series with the front end: see the README)\n", t.Ahead)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tdatapath\tfront end\tback end\tmodel\t\tmeasured\terror\tspeed-up\t")
	worst := 0.0
	for i, rw := range t.Rows {
		dir, up := "", ""
		if i == 0 || t.Rows[i-1].Dir != rw.Dir {
			dir = rw.Dir
		} else {
			up = fmt.Sprintf("x%.2f", rw.SpeedUp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\t%s\t\n", dir, rw.Variant.Name, mib(rw.Front), mib(rw.Back),
			mib(rw.Model), rw.ModelKind, mib(rw.Measured), 100*rw.Error, up)
		worst = max(worst, rw.Error, -rw.Error)
	}
	tw.Flush()
	for _, dir := range []string{"read", "write"} {
		t.writeSummary(&b, dir)
	}
	for _, dir := range []string{"read", "write"} {
		t.writeRequest(&b, dir)
	}
	fmt.Fprintf(&b, "model error: worst %.1f%% over %d rows\n", 100*worst, len(t.Rows))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSummary writes the summary line of one direction: the speed-ups
// before and after, and the fastest row against the bare backend, both
// without the host's work.
func (t *Measurement) writeSummary(w io.Writer, dir string) {
	var first, series, chunks, across, fastest *Row
	for i := range t.Rows {
		rw := &t.Rows[i]
		if rw.Dir != dir {
			continue
		}
		if first == nil {
			first = rw
		}
		switch rw.Variant.Pipelining {
		case AcrossCommands:
			across = rw
		case InChunks:
			chunks = rw
		default:
			series = rw
		}
		if fastest == nil || rw.Measured > fastest.Measured {
			fastest = rw
		}
	}
	if first == nil || series == nil {
		return
	}
	fmt.Fprintf(w, "%s: before -> after (series) x%.2f", dir, float64(series.Measured/first.Measured))
	if chunks != nil && across != nil {
		fmt.Fprintf(w, "; pipelined vs series x%.2f in chunks, x%.2f across commands", float64(chunks.Measured/series.Measured), float64(across.Measured/series.Measured))
	}
	// The bare backend's figures leave the host's work out, and so do the
	// bridge's compared with them.
	fmt.Fprintf(w, "; without the host's work, the fastest (%s) reaches %.0f%% of the bare NBD client's %s MB/s one request at a time",
		strings.TrimPrefix(fastest.Variant.Name, "+ "), 100*float64(fastest.Bridge/t.Bare[dir]), mib(t.Bare[dir]))
	if ba := t.BareAhead[dir]; ba > 0 && across != nil {
		fmt.Fprintf(w, "; across commands, %.0f%% of its %s MB/s with %d in flight (the slower end alone, with a processor for each end, would give %s)",
			100*float64(across.Bridge/ba), mib(ba), t.Ahead, mib(across.Bound))
	}
	fmt.Fprintln(w)
}

// writeRequest writes, for one direction, what pipelining in chunks pays
// per extra request against what it can hide.
func (t *Measurement) writeRequest(w io.Writer, dir string) {
	if t.Chunk >= t.BlockSize {
		return
	}
	n := t.BlockSize / t.Chunk
	c, ok := t.Request[dir]
	if !ok {
		fmt.Fprintf(w, "%s: pipelining in %s chunks makes %d NBD requests of one, in flight together: their cost per request was not fitted (the chunks came out cheaper per byte than whole commands: a noisy run)\n",
			dir, size.Text(int64(t.Chunk)), n)
		return
	}
	var front model.Rate
	for _, rw := range t.Rows {
		if rw.Dir == dir && rw.Variant.Pipelining == InChunks {
			front = rw.Front
		}
	}
	hide := front.Seconds(int64(t.BlockSize)) * float64(n-1) / float64(n)
	fmt.Fprintf(w, "%s: pipelining in %s chunks makes %d NBD requests of one, in flight together: each more costs %.1f us (fitted), to hide at most %.1f us of front end\n",
		dir, size.Text(int64(t.Chunk)), n, float64(c.Fixed)/1e3, hide*1e6)
}

// mib formats a rate in the paper's MB/s (2^20 bytes per second).
func mib(r model.Rate) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.MiBps())
}
