package pipeline

import (
	"context"
	"hash/crc32"
	"io"
	"testing"
)

// loopSource hands out the same sector while b.Loop says go on: one unit
// per benchmark iteration, so ns/op and allocs/op are per unit.
type loopSource struct {
	b   *testing.B
	buf []byte
}

func (s *loopSource) Next(ctx context.Context) ([]byte, error) {
	if !s.b.Loop() {
		return nil, io.EOF
	}
	return s.buf, nil
}

// touch is a stage of almost no work: the cost measured is the pipeline's.
type touch struct{ sum byte }

func (s *touch) Process(ctx context.Context, b []byte) ([]byte, error) {
	s.sum += b[0]
	return b, nil
}

type discard struct{ n int }

func (d *discard) Consume(ctx context.Context, b []byte) error {
	d.n += len(b)
	return nil
}

// sectorPipeline is source -> touch -> touch -> sink on 512-byte sectors.
func sectorPipeline(tb testing.TB, src Source[[]byte], sink Sink[[]byte]) *Pipeline {
	size := func(b []byte) int { return len(b) }
	l := Then(From("src", src).Size(size), "a", Stage[[]byte, []byte](&touch{})).Size(size)
	l = Then(l, "b", Stage[[]byte, []byte](&touch{})).Size(size)
	p, err := l.To("sink", sink)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkDirect is the baseline for BenchmarkUnit: the same source, two
// stages and sink called one after another in a plain loop, no pipeline.
func BenchmarkDirect(b *testing.B) {
	src := &loopSource{b: b, buf: make([]byte, 512)}
	s1, s2, sink := &touch{}, &touch{}, &discard{}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(512)
	for {
		v, err := src.Next(ctx)
		if err != nil {
			break
		}
		v, _ = s1.Process(ctx, v)
		v, _ = s2.Process(ctx, v)
		_ = sink.Consume(ctx, v)
	}
}

// BenchmarkUnit is the pipeline's cost per 512-byte unit through four
// stages, with instrumentation off and on.
func BenchmarkUnit(b *testing.B) {
	for _, inst := range []bool{false, true} {
		name := "off"
		if inst {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			p := sectorPipeline(b, &loopSource{b: b, buf: make([]byte, 512)}, &discard{})
			p.Instrument = inst
			b.ReportAllocs()
			b.SetBytes(512)
			if _, err := p.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// crcStage computes the CRC-32C of its unit reps times: a stage whose cost
// is known in proportion to the others.
type crcStage struct {
	reps int
	sum  uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (s *crcStage) Process(ctx context.Context, b []byte) ([]byte, error) {
	for range s.reps {
		s.sum = crc32.Update(s.sum, castagnoli, b)
	}
	return b, nil
}

// BenchmarkModel runs a datapath of three stages of real work (CRC-32C over
// 64 KiB units, 1, 3 and 2 passes) and reports the model's prediction
// beside the measured rate: the pipeline checking itself against the
// paper's formula 1. It reports MiB/s measured and predicted, and the
// model's error in percent.
func BenchmarkModel(b *testing.B) {
	size := func(v []byte) int { return len(v) }
	l := Then(From("src", Source[[]byte](&loopSource{b: b, buf: make([]byte, 64<<10)})).Size(size),
		"crc1", Stage[[]byte, []byte](&crcStage{reps: 1})).Size(size)
	l = Then(l, "crc3", Stage[[]byte, []byte](&crcStage{reps: 3})).Size(size)
	l = Then(l, "crc2", Stage[[]byte, []byte](&crcStage{reps: 2})).Size(size)
	p, err := l.To("sink", &discard{})
	if err != nil {
		b.Fatal(err)
	}
	p.Instrument = true
	b.ReportAllocs()
	b.SetBytes(64 << 10)
	r, err := p.Run(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if r.Units > 100 {
		b.ReportMetric(r.Measured.MiBps(), "MiB/s")
		b.ReportMetric(r.Predicted.MiBps(), "model-MiB/s")
		b.ReportMetric(100*r.ModelError, "model-err-%")
	}
}
