package paper

import (
	"fmt"
	"math"
	"time"

	"github.com/nhdkit/nhd/model"
)

const (
	// Block is the paper's evaluation block: 64 KiB, 90.52% of reads and
	// 76.05% of writes when Windows copies many files.
	Block = 64 << 10
	// Sector is the ATA sector and the FPGA FIFO's size.
	Sector = 512
	// Payload is the TCP payload of one Ethernet packet on the NHD.
	Payload = 1448
	// PacketsPerACK is how many packets the NHD received per ACK it sent.
	PacketsPerACK = 7
)

const us = time.Microsecond

// Figure is a number as the paper prints it.
type Figure struct {
	Name     string  // where it appears and what it is
	Value    float64 // the printed value
	Decimals int     // digits printed after the point
	Unit     string  // "MB/s" (2^20 B/s) or "%"
}

// String formats f as printed, with its unit.
func (f Figure) String() string {
	if f.Unit == "%" {
		return f.Format(f.Value) + "%"
	}
	return f.Format(f.Value) + " " + f.Unit
}

// Format formats x with f's printed number of decimals.
func (f Figure) Format(x float64) string { return fmt.Sprintf("%.*f", f.Decimals, x) }

// Matches reports whether x agrees with the printed figure to its last
// printed digit: |x - Value| < one unit of that digit. The paper sometimes
// truncates (1.1466 printed 1.146) and sometimes rounds, so a figure
// matches if either reading of x gives the printed digits.
func (f Figure) Matches(x float64) bool {
	return math.Abs(x-f.Value) < math.Pow10(-f.Decimals)
}

// The paper's printed figures.
var (
	FrontBefore    = Figure{"Table 2: front end, no optimisation", 1.821, 3, "MB/s"}
	FrontAfter     = Figure{"Table 2: front end, DMA streaming", 13.17, 2, "MB/s"}
	N3Share        = Figure{"§3.2: N3's share of the front end's time", 86.6, 1, "%"}
	BackBefore     = Figure{"Table 4: back end before (NBD, Figure 4 at 64 KB)", 3.096, 3, "MB/s"}
	BackAfter      = Figure{"§3.3: back end, zero-copy + checksum offload", 5.177, 3, "MB/s"}
	ModelBefore    = Figure{"Table 4: model (formula 1), before", 1.146, 3, "MB/s"}
	ModelAfter     = Figure{"Table 4: model (formula 1), after", 3.714, 3, "MB/s"}
	MeasuredBefore = Figure{"Table 4: measured (WinBench), before", 1.05, 2, "MB/s"}
	MeasuredAfter  = Figure{"Table 4: measured (WinBench), after", 3.45, 2, "MB/s"}
	NBDOfTCP64     = Figure{"§3.3: NBD's share of raw TCP at 64 KB", 98.4, 1, "%"}
)

// N1 is the host's part of the front end: the completion interrupt, the
// 64 KiB kernel-to-user copy and a process switch, 495 us per block.
func N1() model.Node {
	return model.NewNode("N1 host", model.Once("interrupt+copy+switch", 495*us))
}

// N2 is the IDE transfer: Multi-word DMA mode 2 from the 512-byte FIFO to
// host memory, one sector at a time, 32 us measured per sector.
func N2() model.Node {
	return model.NewNode("N2 IDE", model.PerUnit("MDMA sector", Sector, 32*us))
}

// N3 is the CPU <-> FPGA link before optimisation: per sector an interrupt
// (60 us), 256 16-bit PIO writes (138 us) and software (34 us).
func N3() model.Node {
	return model.NewNode("N3 CPU-FPGA",
		model.PerUnit("interrupt", Sector, 60*us),
		model.PerUnit("PIO 256x16 bit", Sector, 138*us),
		model.PerUnit("software", Sector, 34*us))
}

// N3DMA is the CPU <-> FPGA link with DMA streaming: two interrupts per
// block (command and DMA done), 34 us of software, and the CPU's DMA
// feeding the FIFO as fast as MDMA drains it (32 us per sector).
func N3DMA() model.Node {
	return model.NewNode("N3 CPU-FPGA (DMA)",
		model.Once("interrupt", 60*us).Times(2),
		model.Once("software", 34*us),
		model.PerUnit("DMA sector", Sector, 32*us))
}

// FrontEnd is the front-end node before optimisation: N1, N2, N3 in series.
func FrontEnd() model.Cascade { return model.Cascade{N1(), N2(), N3()} }

// FrontEndDMA is the front end with DMA streaming: N1 in series with N2 and
// N3 overlapped. chunk is the streaming granularity; 0 is the paper's ideal
// cut-through ("N2 folded into N3"), Sector the FIFO's real grain.
func FrontEndDMA(chunk int64) model.Cascade {
	return model.Cascade{N1(), model.Overlap("N2+N3 DMA streaming", chunk, N2(), N3DMA())}
}

// BackEndNBD is the back end before optimisation as the paper measured it at
// 64 KB: NBD over the Linux 2.4 stack, 3.096 MB/s (Figure 4). It is a
// measured rate, right at Block only; FitNBD gives a node for every size.
func BackEndNBD() model.Node {
	return model.RateNode("back end NBD", model.Rate(BackBefore.Value)*model.MiBPerSecond)
}

// BackEndZeroCopy is the back end with zero-copy and checksum offload, NBD's
// own cost left out as in the paper: 232 us per 1448-byte packet in, 200 us
// per ACK out, one ACK per 7 packets.
func BackEndZeroCopy() model.Node {
	return model.NewNode("back end zero-copy",
		model.PerUnit("packet in", Payload, 232*us),
		model.PerUnit("ACK out", Payload, 200*us).OnePer(PacketsPerACK))
}

// Figure4Blocks are the block sizes of Figure 4, in bytes.
var Figure4Blocks = []int64{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}

// Figure4NBD are NBD's rates in Figure 4, MB/s, one per Figure4Blocks.
var Figure4NBD = []float64{1.368, 1.995, 2.458, 2.885, 3.096}

// Figure4TCP are raw TCP's rates in Figure 4, MB/s; the 16 KB point is NaN
// because the OCR lost its first decimal ("2名16", read 2.x16). See
// TCP16KCandidates and ReadTCP16K.
var Figure4TCP = []float64{2.238, 2.416, math.NaN(), 3.045, 3.145}

// TCP16KCandidates are the readings of the garbled 16 KB raw TCP point the
// OCR allows: 2.016, 2.116, ..., 2.916.
func TCP16KCandidates() []float64 {
	c := make([]float64, 10)
	for d := range c {
		c[d] = 2.016 + 0.1*float64(d)
	}
	return c
}

// Samples returns the samples of one Figure 4 series, skipping NaN points.
func Samples(rates []float64) []model.Sample {
	var s []model.Sample
	for i, r := range rates {
		if math.IsNaN(r) {
			continue
		}
		s = append(s, model.RateSample(Figure4Blocks[i], model.Rate(r)*model.MiBPerSecond))
	}
	return s
}

// FitTCP fits raw TCP's Figure 4 points (the four legible ones) to an affine
// cost.
func FitTCP() (model.Fit, error) { return model.FitCost(Samples(Figure4TCP)) }

// FitNBD fits NBD's five Figure 4 points to an affine cost.
func FitNBD() (model.Fit, error) { return model.FitCost(Samples(Figure4NBD)) }

// ReadTCP16K decides the garbled 16 KB raw TCP point: the candidate reading
// nearest to what the fit of the four legible points predicts at 16 KB. It
// returns that reading and the prediction, both in MB/s.
func ReadTCP16K() (reading, predicted float64, err error) {
	f, err := FitTCP()
	if err != nil {
		return 0, 0, err
	}
	predicted = f.Cost.Rate(16 << 10).MiBps()
	best := math.Inf(1)
	for _, c := range TCP16KCandidates() {
		if d := math.Abs(c - predicted); d < best {
			best, reading = d, c
		}
	}
	return reading, predicted, nil
}
