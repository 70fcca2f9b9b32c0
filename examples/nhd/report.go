package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/model"
)

// mib formats a rate in the paper's MB/s (2^20 bytes per second).
func mib(r model.Rate) string {
	if r <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r.MiBps())
}

func us(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func (r *report) writeText(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "nhd: a software NHD: host driver -> ATA device -> DMA engine (%s) -> NBD client\n", bridgeText(r.Bridge))
	fmt.Fprintf(w, "server: %s, %s disk, workload span %s; %s\n", r.Server, sizeText(r.DiskSize), sizeText(r.Span), r.Machine)
	fmt.Fprintf(w, "workload %s at depth %d: every byte read verified, the bridge's checksum checked on every command\n\n", c.Workload, c.Depth)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tblock\tcommands\tMB/s\tIOPS\tread p50 us\tp99\twrite p50 us\tp99\tverified\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t\n", p.Name, sizeText(int64(p.BlockSize)), p.Ops,
			mib(model.Rate(p.Rate)), p.IOPS, us(p.Read.P50), us(p.Read.P99), us(p.Write.P50), us(p.Write.P99), p.Verified)
	}
	tw.Flush()
	for _, p := range r.Phases {
		if q := p.QoS; q != nil {
			fmt.Fprintf(w, "QoS of %s: read p99 %s us (limit %s): %s; write p99 %s us (limit %s): %s\n", p.Name,
				us(p.Read.P99), us(q.ReadP99Limit), met(q.ReadMet), us(p.Write.P99), us(q.WriteP99Limit), met(q.WriteMet))
		}
	}
	if t := r.Table; t != nil {
		fmt.Fprintln(w)
		t.writeText(w)
	}
}

func bridgeText(v bridge.Variant) string {
	parts := []string{"store-and-forward"}
	if v.Streaming {
		parts[0] = "streaming through a sector FIFO"
	}
	if v.ZeroCopy {
		parts = append(parts, "zero-copy")
	}
	if v.ChecksumInFlight {
		parts = append(parts, "checksum in flight")
	}
	if v.Pipelining == bridge.Series {
		return strings.Join(append(parts, "ends in series"), ", ")
	}
	return strings.Join(append(parts, "pipelined "+v.Pipelining.String()), ", ")
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func (t *table) writeText(w io.Writer) {
	fmt.Fprintf(w, "Table 4 on this machine: %s sequential READ/WRITE DMA EXT, MB/s = 2^20 B/s, medians of %d commands each\n", sizeText(int64(t.BlockSize)), t.Commands)
	fmt.Fprintln(w, "(front end: host + ATA + DMA over an in-cache memory disk, the disk's calls taken out; back end: the bare NBD client making the bridge's NBD requests;")
	fmt.Fprintf(w, " model: series 1/V = 1/V_front + 1/V_back, fill = one command streamed through both in chunks;\n  across commands the back end is the bare client with %d requests in flight, as the bridge keeps them, in series with the front end: see the README)\n", t.Ahead)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tdatapath\tfront end\tback end\tmodel\t\tmeasured\terror\tspeed-up\t")
	for i, rw := range t.Rows {
		dir := ""
		if i == 0 || t.Rows[i-1].Dir != rw.Dir {
			dir = rw.Dir
		}
		up := ""
		if i > 0 && t.Rows[i-1].Dir == rw.Dir {
			up = fmt.Sprintf("x%.2f", rw.SpeedUp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\t%s\t\n", dir, rw.Variant.Name, mib(rw.Front), mib(rw.Back),
			mib(rw.Model), rw.ModelKind, mib(rw.Measured), 100*rw.Error, up)
	}
	tw.Flush()
	for _, dir := range []string{"read", "write"} {
		t.writeSummary(w, dir)
	}
	if t.Chunk < t.BlockSize {
		n := t.BlockSize / t.Chunk
		for _, dir := range []string{"read", "write"} {
			c, ok := t.Request[dir]
			if !ok {
				continue
			}
			var front model.Rate
			for _, rw := range t.Rows {
				if rw.Dir == dir && rw.Variant.Pipelining == bridge.InChunks {
					front = rw.Front
				}
			}
			hide := front.Seconds(int64(t.BlockSize)) * float64(n-1) / float64(n)
			fmt.Fprintf(w, "%s: pipelining in %s chunks makes %d NBD requests of one, in flight together: each more costs %.1f us (fitted), to hide at most %.1f us of front end\n",
				dir, sizeText(int64(t.Chunk)), n, c.Fixed*1e6, hide*1e6)
		}
	}
	var b strings.Builder
	worst := 0.0
	for _, rw := range t.Rows {
		worst = max(worst, abs(rw.Error))
	}
	fmt.Fprintf(&b, "model error: worst %.1f%% over %d rows\n", 100*worst, len(t.Rows))
	io.WriteString(w, b.String())
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// writeSummary writes the summary line of one direction: the speed-ups
// before and after, and the fastest row against the bare client.
func (t *table) writeSummary(w io.Writer, dir string) {
	var first, series, chunks, across, fastest *row
	for i := range t.Rows {
		rw := &t.Rows[i]
		if rw.Dir != dir {
			continue
		}
		if first == nil {
			first = rw
		}
		switch rw.Variant.Pipelining {
		case bridge.AcrossCommands:
			across = rw
		case bridge.InChunks:
			chunks = rw
		default:
			series = rw
		}
		if fastest == nil || rw.Measured > fastest.Measured {
			fastest = rw
		}
	}
	if first == nil {
		return
	}
	fmt.Fprintf(w, "%s: before -> after (series) x%.2f; pipelined vs series x%.2f in chunks, x%.2f across commands; the fastest (%s) reaches %.0f%% of the bare NBD client's %s MB/s one request at a time",
		dir, float64(series.Measured/first.Measured), float64(chunks.Measured/series.Measured), float64(across.Measured/series.Measured),
		strings.TrimPrefix(fastest.Variant.Name, "+ "), 100*float64(fastest.Measured/t.Bare[dir]), mib(t.Bare[dir]))
	if ba := t.BareAhead[dir]; ba > 0 {
		fmt.Fprintf(w, "; across commands, %.0f%% of its %s MB/s with %d in flight (the slower end alone, with a processor for each end, would give %s)",
			100*float64(across.Measured/ba), mib(ba), t.Ahead, mib(across.Bound))
	}
	fmt.Fprintln(w)
}
