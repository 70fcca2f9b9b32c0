package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestRunPrintsThePaper(t *testing.T) {
	var b bytes.Buffer
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Each row as a regexp over its whitespace-separated cells.
	rows := []string{
		`none: 495 \+ 128x32 \+ 128x\(60\+138\+34\) 495 4096 29696 34287 1\.8228 1\.821 NO, see note`,
		`DMA streaming: 495 \+ 0 \+ \(2x60 \+ 4096 \+ 34\) 495 0 4250 4745 13\.1718 13\.17 yes`,
		`N3's share of the time, no optimisation 86\.61% 86\.6% yes`,
		`N3 CPU-FPGA 2x faster 19439 3\.2152 1\.764 1\.764`,
		`DMA streaming, 512 B chunks 4777 13\.0835`,
		`zero-copy \+ checksum offload 46x232 \+ 7x200 µs 12072 5\.1773 5\.177 yes`,
		`NBD / raw TCP at 64 KB 3\.096 / 3\.145 98\.44% 98\.4% yes`,
		`before 1\.821 3\.096 1\.1466 1\.146 yes 1\.1473 1\.05 91\.6%`,
		`after 13\.17 5\.177 3\.7162 3\.714 NO, see note 3\.7165 3\.45 92\.8%`,
		`before 1\.147 1\.674 \(x1\.46\) 1\.408 \(x1\.23\) 1\.823 \(x1\.59\) 3\.646 front end 62\.9%`,
		`after 3\.716 4\.327 \(x1\.16\) 5\.797 \(x1\.56\) 5\.177 \(x1\.39\) 10\.355 back end zero-copy 71\.8%`,
		`raw TCP \(16 KB left out\) 4 680\.7 292\.89`,
		`NBD 5 1660\.6 282\.29`,
		`NBD's per-request overhead over raw TCP: 711 µs a request,`,
		`the nearest reading is 2\.816,`,
		`4 KiB 2\.077 1\.387 1\.508 72\.6% 2\.238 1\.368`,
		`16 KiB 2\.852 2\.486 2\.524 88\.5% \(2\.816\) 2\.458`,
		`64 KiB 3\.145 3\.100 3\.036 96\.5% 3\.145 3\.096`,
		`1 MiB 3\.249 3\.359 3\.241 99\.8% \(extrapolated\)`,
	}
	flat := regexp.MustCompile(`[ \t]+`).ReplaceAllString(out, " ")
	for _, r := range rows {
		if !regexp.MustCompile(`(?m)(^| )` + r + `( |$)`).MatchString(flat) {
			t.Errorf("output lacks the row %q", r)
		}
	}
	// The curve has one row per power of two from 4 KiB to 1 MiB.
	curve := out[strings.Index(out, "Block-size curve"):]
	if n := len(regexp.MustCompile(`(?m)^\s+\d+ (KiB|MiB) `).FindAllString(curve, -1)); n != 9 {
		t.Errorf("curve has %d rows, want 9\n%s", n, curve)
	}
	// Only the two documented slips of the paper fail to match.
	if n := strings.Count(out, "NO, see note"); n != 2 {
		t.Errorf("%d mismatches with the paper, want the 2 documented ones", n)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n--; w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestRunReportsWriteErrors(t *testing.T) {
	for _, n := range []int{0, 3, 20} {
		if err := run(&failWriter{n: n}); err == nil {
			t.Errorf("run with a writer failing after %d writes returned nil", n)
		}
	}
}
