package model_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/nhdkit/nhd/model"
)

const µs = time.Microsecond

// The paper's front end before optimisation: three nodes, their shares of a
// 64 KiB read and the bottleneck.
func ExampleCascade_Predict() {
	front := model.Cascade{
		model.NewNode("N1 host", model.Once("interrupt, copy, switch", 495*µs)),
		model.NewNode("N2 IDE", model.PerUnit("sector", 512, 32*µs)),
		model.NewNode("N3 CPU-FPGA",
			model.PerUnit("interrupt", 512, 60*µs),
			model.PerUnit("PIO", 512, 138*µs),
			model.PerUnit("software", 512, 34*µs)),
	}
	p := front.Predict(64 << 10)
	fmt.Printf("%.0f µs, %.4f MB/s\n", p.Seconds*1e6, p.Series.MiBps())
	for _, s := range p.Shares {
		fmt.Println(s)
	}
	fmt.Println("bottleneck:", p.Bottleneck.Name)
	fmt.Printf("N3 2x faster: %.2fx overall\n", front.SpeedUp(64<<10, 2, 2))
	// Output:
	// 34287 µs, 1.8228 MB/s
	// N1 host 1.4% (495 µs, 126.3 MiB/s)
	// N2 IDE 11.9% (4096 µs, 15.26 MiB/s)
	// N3 CPU-FPGA 86.6% (29696 µs, 2.105 MiB/s)
	// bottleneck: N3 CPU-FPGA
	// N3 2x faster: 1.76x overall
}

// Formula 1 over rates, and the same nodes overlapped.
func ExampleSeries() {
	front := 13.17 * model.MiBPerSecond
	back := 5.177 * model.MiBPerSecond
	fmt.Printf("series %.4f, pipelined %.4f MB/s\n",
		model.Series(front, back).MiBps(), model.Pipelined(front, back).MiBps())
	// Output:
	// series 3.7162, pipelined 5.1770 MB/s
}

// Pipeline stages that measured their own rates get an end-to-end
// prediction and the stage to work on.
func ExampleRateNode() {
	stages := model.Cascade{
		model.RateNode("decode", 900*model.MiBPerSecond),
		model.RateNode("nbd read", 300*model.MiBPerSecond),
		model.RateNode("dma", 600*model.MiBPerSecond),
	}
	p := stages.Predict(64 << 10)
	fmt.Printf("synchronous %.0f MiB/s, overlapped %.0f MiB/s\n", p.Series.MiBps(), p.Pipelined.MiBps())
	fmt.Printf("bottleneck %s, %.0f%% of the time\n", p.Bottleneck.Name, 100*p.Bottleneck.Fraction)
	fmt.Printf("4 KiB chunks streaming: %.0f MiB/s\n", stages.PipelinedFill(64<<10, 4<<10).MiBps())
	// Output:
	// synchronous 164 MiB/s, overlapped 300 MiB/s
	// bottleneck nbd read, 55% of the time
	// 4 KiB chunks streaming: 285 MiB/s
}

// DMA streaming: the CPU fills the FIFO while the IDE bus drains it. The
// block takes the first chunk's trip through both stages plus the rest at
// the slower stage's pace.
func ExampleOverlap() {
	ide := model.NewNode("IDE", model.PerUnit("sector", 512, 32*µs))
	dma := model.NewNode("DMA",
		model.Once("interrupt", 60*µs).Times(2),
		model.Once("software", 34*µs),
		model.PerUnit("sector", 512, 32*µs))
	for _, chunk := range []int64{0, 512, 8 << 10, 64 << 10} {
		n := model.Overlap("N2+N3", chunk, ide, dma)
		fmt.Printf("chunk %5d: %4.0f µs\n", chunk, n.Seconds(64<<10)*1e6)
	}
	// Output:
	// chunk     0: 4250 µs
	// chunk   512: 4282 µs
	// chunk  8192: 4762 µs
	// chunk 65536: 8346 µs
}

// Per-packet and per-ACK costs multiply out from the block size.
func ExamplePerUnit() {
	back := model.NewNode("zero-copy back end",
		model.PerUnit("packet in", 1448, 232*µs),
		model.PerUnit("ACK out", 1448, 200*µs).OnePer(7))
	for _, t := range back.Terms {
		fmt.Printf("%s x %d\n", t.Name, t.Count(64<<10))
	}
	fmt.Printf("%v, %.3f MB/s\n", back.Duration(64<<10), back.Rate(64<<10).MiBps())
	// Output:
	// packet in x 46
	// ACK out x 7
	// 12.072ms, 5.177 MB/s
}

// Fitting NBD's measured points (the paper's Figure 4) to fixed + per-byte.
func ExampleFitCost() {
	var samples []model.Sample
	for i, r := range []float64{1.368, 1.995, 2.458, 2.885, 3.096} {
		samples = append(samples, model.RateSample(4096<<i, model.Rate(r)*model.MiBPerSecond))
	}
	f, err := model.FitCost(samples)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f.Cost)
	fmt.Printf("worst point %.1f%% off, R² %.4f\n", 100*f.MaxRel, f.R2)
	fmt.Printf("at 1 MiB: %.3f MB/s\n", f.Cost.Rate(1<<20).MiBps())
	// Output:
	// 1660.6 µs + 3.378 MiB/s
	// worst point 1.5% off, R² 0.9999
	// at 1 MiB: 3.359 MB/s
}

// Little's law: 32 requests in flight at 250 µs each, 8 KiB per request.
func ExampleIOPS() {
	iops := model.IOPS(32, 250*µs)
	fmt.Printf("%.0f IOPS, %.0f MiB/s\n", iops, model.Bandwidth(iops, 8<<10).MiBps())
	// Output:
	// 128000 IOPS, 1000 MiB/s
}

// A fitted cost becomes a node only when it is physical: a line whose
// fixed part comes out negative is reported, not used.
func ExampleNewCostNode() {
	fit, err := model.FitCost([]model.Sample{
		model.SampleOf(4096, 2*time.Millisecond),
		model.SampleOf(65536, 20*time.Millisecond),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := model.NewCostNode("NBD request", fit.Cost)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v: %v for 16 KiB\n", fit.Cost, n.Duration(16<<10))

	// Small blocks much faster than the big ones predict.
	_, err = model.FitCost([]model.Sample{
		model.SampleOf(4096, 10*time.Microsecond),
		model.SampleOf(65536, 20*time.Millisecond),
	})
	fmt.Println(errors.Is(err, model.ErrNonPhysical), err)
	// Output:
	// 800.0 µs + 3.255 MiB/s: 5.6ms for 16 KiB
	// true model: non-physical cost or rate: fixed cost -1.322667ms below zero (fitted line -1322.7 µs + 2.931 MiB/s)
}

// A Rate keeps no unit: String says MiB/s, In prints the unit asked for.
func ExampleRate_In() {
	r := 16 * model.MBPerSecond
	fmt.Println(r, "=", r.In(model.MBPerSecond))
	// Output: 15.26 MiB/s = 16 MB/s
}
