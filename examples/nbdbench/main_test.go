package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// Each job kind runs briefly against the in-process server and reports
// operations of the right kinds.
func TestJobs(t *testing.T) {
	srv := nbdtest.Start(t, nbdtest.WithSize(8<<20))
	for _, j := range []job{
		{RW: "read", BS: 4096, IODepth: 4},
		{RW: "write", BS: 64 << 10, IODepth: 2},
		{RW: "randread", BS: 4096, IODepth: 8, Connections: 2},
		{RW: "randwrite", BS: 8192, IODepth: 1},
		{RW: "randrw", BS: 4096, IODepth: 4, MixRead: 70},
		{RW: "read", BS: 4096, IODepth: 4, Engine: "async"},
		{RW: "write", BS: 64 << 10, IODepth: 3, Engine: "async"},
		{RW: "randrw", BS: 4096, IODepth: 8, MixRead: 50, Engine: "async", Connections: 2},
	} {
		t.Run(j.RW+"-"+j.Engine, func(t *testing.T) {
			j.URI = srv.URI
			j.Runtime = 200 * time.Millisecond
			res, err := j.run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			reads := strings.Contains(j.RW, "read") || j.RW == "randrw"
			writes := strings.Contains(j.RW, "write") || j.RW == "randrw"
			if (res.Read.Ops > 0) != reads || (res.Write.Ops > 0) != writes {
				t.Fatalf("%s: %d reads, %d writes", j.RW, res.Read.Ops, res.Write.Ops)
			}
			if res.Read.Bytes != res.Read.Ops*j.BS || res.Write.Bytes != res.Write.Ops*j.BS {
				t.Fatal("bytes do not match operations")
			}
			var out bytes.Buffer
			res.print(&out)
			if !strings.Contains(out.String(), "IOPS=") || !strings.Contains(out.String(), "p99.9=") {
				t.Fatalf("output:\n%s", out.String())
			}
			t.Log(out.String())
		})
	}
}

func TestJobValidation(t *testing.T) {
	for _, j := range []job{
		{RW: "trim", BS: 4096, IODepth: 1, Runtime: time.Second},
		{RW: "read", BS: 0, IODepth: 1, Runtime: time.Second},
		{RW: "read", BS: 4096, IODepth: 0, Runtime: time.Second},
		{RW: "randrw", BS: 4096, IODepth: 1, MixRead: 101, Runtime: time.Second},
		{RW: "read", BS: 4096, IODepth: 1},
		{RW: "read", BS: 4096, IODepth: 1, Runtime: time.Second, Engine: "threads"},
	} {
		if _, err := j.run(context.Background()); err == nil {
			t.Errorf("%+v accepted", j)
		}
	}
	if _, err := (job{URI: "nbd://h/?bogus=1", RW: "read", BS: 4096, IODepth: 1, Runtime: time.Second}).run(context.Background()); err == nil {
		t.Error("bad URI accepted")
	}
}
