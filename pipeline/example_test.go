package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nhdkit/nhd/pipeline"
)

// numbers is a Source of 1..n.
type numbers struct{ i, n int }

func (s *numbers) Next(ctx context.Context) (int, error) {
	if s.i == s.n {
		return 0, io.EOF
	}
	s.i++
	return s.i, nil
}

// A source, two stages and a sink, taking turns on each unit on the
// caller's goroutine. Units arrive in order.
func Example() {
	square := pipeline.StageFunc[int, int](func(ctx context.Context, x int) (int, error) { return x * x, nil })
	label := pipeline.StageFunc[int, string](func(ctx context.Context, x int) (string, error) {
		return fmt.Sprintf("<%d>", x), nil
	})
	var out []string
	sink := pipeline.SinkFunc[string](func(ctx context.Context, s string) error {
		out = append(out, s)
		return nil
	})

	l := pipeline.From("numbers", &numbers{n: 6})
	sq := pipeline.Then(l, "square", square)
	lb := pipeline.Then(sq, "label", label)
	p, err := lb.To("collect", sink)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p)
	rep, err := p.Run(context.Background())
	fmt.Println(out, err)
	for _, s := range rep.Stages {
		fmt.Println(s.Name, s.State, s.Units)
	}
	// Output:
	// numbers -> square -> label -> collect
	// [<1> <4> <9> <16> <25> <36>] <nil>
	// numbers done 6
	// square done 6
	// label done 6
	// collect done 6
}

// The first error stops the pipeline. Run returns it as a *StageError that
// names the stage and the unit; the sink has seen exactly the stream up to
// the failure.
func Example_failure() {
	errBadBlock := errors.New("bad block")
	check := pipeline.StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if x == 4 {
			return 0, errBadBlock
		}
		return x, nil
	})
	var got []int
	p, err := pipeline.Then(pipeline.From("numbers", &numbers{n: 100}), "check", check).
		To("collect", pipeline.SinkFunc[int](func(ctx context.Context, x int) error {
			got = append(got, x)
			return nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := p.Run(context.Background())
	var se *pipeline.StageError
	fmt.Println(errors.Is(err, errBadBlock), errors.As(err, &se), se.Stage, se.Unit)
	fmt.Println(err)
	fmt.Println("sink got", got)
	for _, s := range rep.Stages {
		fmt.Println(s.Name, s.State, s.Units)
	}
	// Output:
	// true true check 3
	// pipeline: stage 1 "check", unit 3: bad block
	// sink got [1 2 3]
	// numbers stopped 4
	// check failed 3
	// collect done 3
}

// A Histogram keeps durations in log-linear buckets: quantiles within 1/32
// of the exact ones, and Record allocates nothing.
func ExampleHistogram() {
	var h pipeline.Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	s := h.Summary()
	fmt.Println(s.Count, s.Min, s.Max, s.Mean)
	for _, q := range []time.Duration{s.P50, s.P99, s.P999} {
		fmt.Printf("%.0fµs ", float64(q)/1e3)
	}
	fmt.Println()
	// Output:
	// 1000 1µs 1ms 500.5µs
	// 504µs 991µs 991µs
}

// With Instrument on, the report has each stage's time and rate, the
// model's prediction (the stages in series) beside the measured rate, and
// the bottleneck. The numbers depend on the machine; this prints the parts
// that do not.
func ExampleReport() {
	spin := func(d time.Duration) pipeline.StageFunc[[]byte, []byte] {
		return func(ctx context.Context, b []byte) ([]byte, error) {
			for t := time.Now(); time.Since(t) < d; {
			}
			return b, nil
		}
	}
	buf := make([]byte, 4096)
	n := 0
	src := pipeline.SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) {
		if n == 300 {
			return nil, io.EOF
		}
		n++
		return buf, nil
	})
	size := func(b []byte) int { return len(b) }
	l := pipeline.Then(pipeline.From("src", src).Size(size),
		"front", spin(5*time.Microsecond)).Size(size)
	l = pipeline.Then(l, "back", spin(200*time.Microsecond)).Size(size)
	p, err := l.To("sink", pipeline.SinkFunc[[]byte](func(context.Context, []byte) error { return nil }))
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Instrument = true
	rep, err := p.Run(context.Background())
	fmt.Println(rep.Units, rep.Bytes, rep.RateUnit, err)
	fmt.Println("bottleneck:", rep.Bottleneck, rep.Share > 0.5)
	fmt.Println("model within 25%:", rep.ModelError > -0.25 && rep.ModelError < 0.25)
	// Output:
	// 300 1228800 B/s <nil>
	// bottleneck: back true
	// model within 25%: true
}
