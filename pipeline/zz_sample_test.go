package pipeline

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

func TestZZSample(t *testing.T) {
	wait := func(d time.Duration) Stage[[]byte, []byte] {
		return StageFunc[[]byte, []byte](func(ctx context.Context, b []byte) ([]byte, error) {
			time.Sleep(d)
			return b, nil
		})
	}
	size := func(b []byte) int { return len(b) }
	buf := make([]byte, 64<<10)
	mk := func(link Link, par int) *Pipeline {
		n := 0
		src := SourceFunc[[]byte](func(ctx context.Context) ([]byte, error) {
			if n == 200 {
				return nil, io.EOF
			}
			n++
			return buf, nil
		})
		l := Then(From("host", Source[[]byte](src)).Size(size), Inline(), "front", wait(1*time.Millisecond)).Size(size)
		var l2 *Line[[]byte]
		if par > 0 {
			l2 = Parallel(l, 4, "back", par, func(int) Stage[[]byte, []byte] { return wait(3 * time.Millisecond) }).Size(size)
			link = Ring(4)
		} else {
			l2 = Then(l, link, "back", wait(3*time.Millisecond)).Size(size)
			link = Inline()
		}
		p, err := l2.To(link, "verify", SinkFunc[[]byte](func(context.Context, []byte) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		p.Instrument = true
		return p
	}
	var vs []Variant
	for _, c := range []struct {
		name string
		link Link
		par  int
	}{{"series", Inline(), 0}, {"pipelined", Ring(4), 0}, {"back x4", Ring(4), 4}} {
		p := mk(c.link, c.par)
		r, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r.WriteTable(os.Stdout)
		os.Stdout.WriteString("\n")
		vs = append(vs, Variant{c.name, r})
	}
	WriteComparison(os.Stdout, vs)
}
