package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/internal/size"
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

func (r *report) writeText(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "nhd: a software NHD: host driver -> ATA device -> DMA engine (%s) -> NBD client\n", bridgeText(r.Bridge))
	fmt.Fprintf(w, "server: %s, %s disk, workload span %s; %s\n", r.Server, size.Text(r.DiskSize), size.Text(r.Span), r.Machine)
	fmt.Fprintf(w, "workload %s at depth %d: every byte read verified, the bridge's checksum checked on every command\n\n", c.Workload, c.Depth)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tblock\tcommands\tMB/s\tIOPS\tread p50 us\tp99\twrite p50 us\tp99\tverified\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t\n", p.Name, size.Text(int64(p.BlockSize)), p.Ops,
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
		t.WriteText(w)
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
