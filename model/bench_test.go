package model

import (
	"testing"
	"time"
)

func benchFront() Cascade {
	return Cascade{
		NewNode("N1", Once("host", 495*time.Microsecond)),
		NewNode("N2", PerUnit("sector", 512, 32*time.Microsecond)),
		NewNode("N3", PerUnit("irq", 512, 60*time.Microsecond), PerUnit("pio", 512, 138*time.Microsecond),
			PerUnit("sw", 512, 34*time.Microsecond)),
	}
}

// BenchmarkCascadeSeries is one end-to-end prediction of a three-node
// cascade: what a pipeline pays to ask the model, per call.
func BenchmarkCascadeSeries(b *testing.B) {
	c := benchFront()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Series(64 << 10)
	}
}

// BenchmarkPredict includes the shares slice, its one allocation.
func BenchmarkPredict(b *testing.B) {
	c := benchFront()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Predict(64 << 10)
	}
}

// BenchmarkPipelinedFill streams a 1 MiB block through the cascade in
// 512-byte chunks; the closed form costs the same for any chunk count.
func BenchmarkPipelinedFill(b *testing.B) {
	c := benchFront()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.PipelinedFill(1<<20, 512)
	}
}
