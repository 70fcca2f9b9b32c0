package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd/nbdtest"
	"pgregory.net/rapid"
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
	} {
		t.Run(j.RW, func(t *testing.T) {
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
	} {
		if _, err := j.run(context.Background()); err == nil {
			t.Errorf("%+v accepted", j)
		}
	}
	if _, err := (job{URI: "nbd://h/?bogus=1", RW: "read", BS: 4096, IODepth: 1, Runtime: time.Second}).run(context.Background()); err == nil {
		t.Error("bad URI accepted")
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"4k": 4096, "64K": 65536, "1m": 1 << 20, "2g": 2 << 30, "512": 512} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "k", "-1", "x4"} {
		if _, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) accepted", s)
		}
	}
}

// The histogram's quantiles are within its resolution of the exact ones.
func TestHistQuantile(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(rapid.Int64Range(0, int64(10*time.Second)), 1, 500).Draw(t, "vals")
		var h hist
		for _, v := range vals {
			h.add(time.Duration(v))
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.5, 0.99, 0.999, 1} {
			exact := vals[int(q*float64(len(vals)-1))]
			got := int64(h.quantile(q))
			if got > exact || float64(exact-got) > float64(exact)/histSub+1 {
				t.Fatalf("q%.3f = %d, exact %d", q, got, exact)
			}
		}
	})
}

func TestHistBuckets(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<20; v += 1 + v/64 {
		b := histBucket(v)
		if b < prev || histLow(b) > v {
			t.Fatalf("bucket(%d) = %d (low %d), previous %d", v, b, histLow(b), prev)
		}
		prev = b
	}
	if b := histBucket(1<<62 + 12345); b >= len(hist{}.counts) {
		t.Fatalf("bucket out of range: %d", b)
	}
}
