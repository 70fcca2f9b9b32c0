package model_test

import (
	"math"
	"testing"

	"github.com/nhdkit/nhd/model"
	"github.com/nhdkit/nhd/model/paper"
)

const k = paper.Block

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g (±%g)", what, got, want, tol)
	}
}

func mib(x float64) model.Rate { return model.Rate(x) * model.MiBPerSecond }

// Table 2, first row: 495 + 128x32 + 128x(60+138+34) us.
func TestTable2Before(t *testing.T) {
	fe := paper.FrontEnd()
	near(t, "front end time (us)", fe.Seconds(k)*1e6, 34287, 1e-6)
	want := []float64{495, 4096, 29696}
	for i, s := range fe.Shares(k) {
		near(t, s.Name+" (us)", s.Seconds*1e6, want[i], 1e-6)
	}
	if b := fe.Bottleneck(k); b.Name != "N3 CPU-FPGA" || !paper.N3Share.Matches(100*b.Fraction) ||
		paper.N3Share.Format(100*b.Fraction) != "86.6" {
		t.Errorf("bottleneck %v, want N3 at %v", b, paper.N3Share)
	}
	// The paper prints 1.821; its own inputs give 1.8228 (34287 us for
	// 64 KiB). No unit makes both this and 5.177 come out (see README), so
	// the test pins the recomputed value and the size of the paper's slip.
	r := fe.Series(k).MiBps()
	near(t, "front end (MB/s)", r, 1.82285, 5e-5)
	if paper.FrontBefore.Matches(r) {
		t.Errorf("front end %.4f now matches the printed %v: update the README's note", r, paper.FrontBefore)
	}
	if rel := math.Abs(r-paper.FrontBefore.Value) / r; rel > 0.0011 {
		t.Errorf("front end %.4f is %.2f%% from the paper's %v", r, 100*rel, paper.FrontBefore)
	}
}

// Table 2, second row: N3 = 2 interrupts + I/O + software = 4250 us,
// N2 folded into it, front end 13.17 MB/s.
func TestTable2DMAStreaming(t *testing.T) {
	fe := paper.FrontEndDMA(0)
	sh := fe.Shares(k)
	near(t, "N1 (us)", sh[0].Seconds*1e6, 495, 1e-6)
	near(t, "N2+N3 (us)", sh[1].Seconds*1e6, 4250, 1e-6)
	r := fe.Series(k).MiBps()
	if !paper.FrontAfter.Matches(r) || paper.FrontAfter.Format(r) != "13.17" {
		t.Errorf("front end with DMA streaming = %.4f MB/s, paper %v", r, paper.FrontAfter)
	}
	// At the FIFO's real grain the first sector has to fill the pipe: 32 us more.
	near(t, "sector-grain fill (us)", paper.FrontEndDMA(paper.Sector).Seconds(k)*1e6, 4745+32, 1e-6)
	// The 3.3x of the abstract is mostly this: 34287 -> 4745 us.
	near(t, "front-end speed-up", paper.FrontEnd().Seconds(k)/fe.Seconds(k), 7.226, 5e-4)
}

// §3.3: 46 x 232 + 7 x 200 = 12072 us -> 5.177 MB/s.
func TestBackEndZeroCopy(t *testing.T) {
	n := paper.BackEndZeroCopy()
	counts := []int64{46, 7}
	for i, term := range n.Terms {
		if c := term.Count(k); c != counts[i] {
			t.Errorf("%s count = %d, want %d", term.Name, c, counts[i])
		}
	}
	near(t, "back end (us)", n.Seconds(k)*1e6, 12072, 1e-6)
	r := n.Rate(k).MiBps()
	if paper.BackAfter.Format(r) != "5.177" {
		t.Errorf("back end = %.4f MB/s, paper %v", r, paper.BackAfter)
	}
}

// Table 4's model column is formula 1 over the table's own front and back
// end columns.
func TestTable4Model(t *testing.T) {
	before := model.Series(mib(paper.FrontBefore.Value), mib(paper.BackBefore.Value)).MiBps()
	near(t, "model before", before, 1.14660, 5e-6)
	if !paper.ModelBefore.Matches(before) {
		t.Errorf("model before = %.4f, paper %v", before, paper.ModelBefore)
	}
	// The paper prints 3.714; formula 1 over 13.17 and 5.177 is 3.7162, and
	// over the unrounded 4745 us and 12072 us 3.7165. The slip is 0.06%.
	after := model.Series(mib(paper.FrontAfter.Value), mib(paper.BackAfter.Value)).MiBps()
	near(t, "model after", after, 3.71620, 5e-6)
	sys := model.Cascade{model.NewNode("front", model.Once("", 4745e3)), paper.BackEndZeroCopy()}
	near(t, "model after, from times", sys.Series(k).MiBps(), 3.71648, 5e-6)
	if paper.ModelAfter.Matches(after) {
		t.Errorf("model after %.4f now matches the printed %v: update the README's note", after, paper.ModelAfter)
	}
	if rel := math.Abs(after-paper.ModelAfter.Value) / after; rel > 0.0007 {
		t.Errorf("model after %.4f is %.2f%% from the paper's %v", after, 100*rel, paper.ModelAfter)
	}
	// The measured column is 8% and 7% below the model.
	near(t, "measured/model before", paper.MeasuredBefore.Value/before, 0.916, 5e-4)
	near(t, "measured/model after", paper.MeasuredAfter.Value/after, 0.928, 5e-4)
}

// §3.3: at 64 KB NBD reaches 98.4% of raw TCP.
func TestNBDShareOfTCP(t *testing.T) {
	got := 100 * paper.Figure4NBD[4] / paper.Figure4TCP[4]
	if !paper.NBDOfTCP64.Matches(got) || paper.NBDOfTCP64.Format(got) != "98.4" {
		t.Errorf("NBD/TCP at 64 KB = %.2f%%, paper %v", got, paper.NBDOfTCP64)
	}
}

// Optimising N3 is the paper's reasoning: it holds 86.6% of the time, so
// making it 2x faster gains what Amdahl's law says, and N1 barely matters.
func TestWhatIfN3(t *testing.T) {
	fe := paper.FrontEnd()
	sh := fe.Shares(k)
	for i := range fe {
		got := fe.SpeedUp(k, i, 2)
		near(t, sh[i].Name+" 2x", got, model.Amdahl(sh[i].Fraction, 2), 1e-12)
	}
	near(t, "N3 2x", fe.SpeedUp(k, 2, 2), 34287.0/(495+4096+29696.0/2), 1e-12)
	near(t, "N3 infinitely fast", fe.SpeedUp(k, 2, math.Inf(1)), 34287.0/4591, 1e-9)
}
