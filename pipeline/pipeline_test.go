package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

var errBoom = errors.New("test: boom")

// unit is the property test's unit: its position in the stream and a value.
type unit struct{ idx, val int }

// affine is a stage val -> a·val + b that fails on the unit of index failAt.
type affine struct {
	a, b   int
	failAt int // -1: never
}

func (s *affine) Process(ctx context.Context, u unit) (unit, error) {
	if u.idx == s.failAt {
		return unit{}, errBoom
	}
	return unit{u.idx, s.a*u.val + s.b}, nil
}

// unitSource produces units 0..n-1 and fails instead of producing unit
// failAt.
type unitSource struct{ i, n, failAt int }

func (s *unitSource) Next(ctx context.Context) (unit, error) {
	if s.i == s.n {
		return unit{}, io.EOF
	}
	if s.i == s.failAt {
		return unit{}, errBoom
	}
	s.i++
	return unit{s.i - 1, s.i - 1}, nil
}

// unitSink collects values and fails instead of consuming unit failAt.
type unitSink struct {
	got    []int
	failAt int
}

func (s *unitSink) Consume(ctx context.Context, u unit) error {
	if u.idx == s.failAt {
		return errBoom
	}
	if u.idx != len(s.got) {
		return fmt.Errorf("unit %d arrived at position %d", u.idx, len(s.got))
	}
	s.got = append(s.got, u.val)
	return nil
}

// TestPropertyOutputs: any chain of stages produces the outputs of
// composing the stage functions directly, in order; a failure at stage f
// on unit k leaves every stage's count, state and the sink's output
// exactly as the contract says.
func TestPropertyOutputs(t *testing.T) {
	checkNoLeaks(t)
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(t, "units")
		m := rapid.IntRange(0, 5).Draw(t, "stages")
		nodes := m + 2

		src := &unitSource{n: n, failAt: -1}
		l := From("src", Source[unit](src))
		fns := make([]*affine, m)
		for i := range fns {
			f := &affine{
				a:      rapid.IntRange(-3, 3).Draw(t, "a"),
				b:      rapid.IntRange(-100, 100).Draw(t, "b"),
				failAt: -1,
			}
			fns[i] = f
			name := fmt.Sprintf("f%d", i+1)
			l = Then(l, name, Stage[unit, unit](f))
		}
		sink := &unitSink{failAt: -1}
		p, err := l.To("sink", sink)
		if err != nil {
			t.Fatal(err)
		}
		var want []int
		for x := range n {
			for _, f := range fns {
				x = f.a*x + f.b
			}
			want = append(want, x)
		}
		// The same pipeline runs several times, failing or not: each run
		// starts clean whatever the last one left.
		for range rapid.IntRange(1, 3).Draw(t, "runs") {
			fail := rapid.IntRange(-1, nodes-1).Draw(t, "failing stage") // -1: none
			failAt := -1
			if fail >= 0 {
				failAt = rapid.IntRange(0, n).Draw(t, "failing unit") // n: never reached
			}
			at := func(i int) int {
				if i == fail {
					return failAt
				}
				return -1
			}
			src.i, src.failAt = 0, at(0)
			for i, f := range fns {
				f.failAt = at(i + 1)
			}
			sink.got, sink.failAt = nil, at(nodes-1)
			p.Instrument = rapid.Bool().Draw(t, "instrument")
			r, err := p.Run(context.Background())
			checkRun(t, r, err, want, sink.got, fail, failAt)
		}
	})
}

// checkRun checks one run of TestPropertyOutputs against the contract.
func checkRun(t *rapid.T, r Report, err error, want, got []int, fail, failAt int) {
	n := len(want)
	if fail < 0 || failAt >= n {
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
			t.Fatalf("outputs (-want +got):\n%s", diff)
		}
		for _, s := range r.Stages {
			if s.Units != uint64(n) || s.State != StateDone {
				t.Fatalf("stage %q: %d units, %v; want %d, done", s.Name, s.Units, s.State, n)
			}
		}
		if r.Units != uint64(n) || r.Err != "" {
			t.Fatalf("report: %d units, error %q", r.Units, r.Err)
		}
		return
	}
	var se *StageError
	if !errors.As(err, &se) || !errors.Is(err, errBoom) {
		t.Fatalf("Run: %v, want a *StageError wrapping errBoom", err)
	}
	if se.Index != fail || se.Unit != uint64(failAt) || se.Stage != r.Stages[fail].Name {
		t.Fatalf("StageError %+v, want stage %d unit %d", se, fail, failAt)
	}
	if r.Err != err.Error() {
		t.Fatalf("report error %q, Run's %q", r.Err, err)
	}
	// The units before the failed one all reached the sink.
	if diff := cmp.Diff(want[:failAt], got, cmpEmpty); diff != "" {
		t.Fatalf("outputs (-want +got):\n%s", diff)
	}
	for i, s := range r.Stages {
		switch {
		case i == fail:
			if s.State != StateFailed || s.Err != errBoom.Error() || s.Units != uint64(failAt) {
				t.Fatalf("failed stage %d: %+v", i, s)
			}
		case i > fail:
			if s.State != StateDone || s.Units != uint64(failAt) || s.Err != "" {
				t.Fatalf("stage %d after the failure: %+v", i, s)
			}
		default:
			// It completed the failed unit too, and handed it on.
			if s.State != StateStopped || s.Units != uint64(failAt+1) || s.Err != "" {
				t.Fatalf("stage %d before the failure: %+v", i, s)
			}
		}
	}
	if r.Units != uint64(failAt) {
		t.Fatalf("report: %d units, want %d", r.Units, failAt)
	}
}

// cmpEmpty treats nil and empty slices alike.
var cmpEmpty = cmp.Comparer(func(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
})

// blockers are stages that wait for ctx: they stand for a stage stuck on
// the network when the run is cancelled.
func blockUntilDone(started chan<- struct{}) StageFunc[int, int] {
	return func(ctx context.Context, x int) (int, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
}

func TestCancelStopsEveryStage(t *testing.T) {
	checkNoLeaks(t)
	started := make(chan struct{}, 1)
	src := &counter{n: 1 << 30}
	l := Then(From("src", Source[int](src)), "busy", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return x, nil }))
	l = Then(l, "stuck", blockUntilDone(started))
	sink := &collect[int]{}
	p, err := l.To("sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	p.Instrument = true
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("test: operator stop")
	go func() {
		<-started
		cancel(cause)
	}()
	r, err := p.Run(ctx)
	if !errors.Is(err, cause) {
		t.Fatalf("Run: %v, want the cancel cause", err)
	}
	for _, s := range r.Stages {
		if s.State != StateStopped || s.Err != "" {
			t.Errorf("stage %q: %v %q, want stopped", s.Name, s.State, s.Err)
		}
	}
	if r.Stages[2].Units != 0 || len(sink.got) != 0 {
		t.Errorf("stuck stage completed %d units, sink %d", r.Stages[2].Units, len(sink.got))
	}
}

// TestDeadline: a run stopped by its context's deadline reports it.
func TestDeadline(t *testing.T) {
	checkNoLeaks(t)
	l := Then(From("src", Source[int](&counter{n: 1 << 40})), "id", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return x, nil }))
	sink := &collect[int]{}
	p, err := l.To("sink", SinkFunc[int](func(ctx context.Context, v int) error {
		sink.got = sink.got[:0] // keep memory flat
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r, err := p.Run(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	if r.Units == 0 || r.Stages[0].Units < r.Units {
		t.Fatalf("units: source %d, sink %d", r.Stages[0].Units, r.Units)
	}
}

func TestRunAgain(t *testing.T) {
	checkNoLeaks(t)
	src := &counter{n: 100}
	sink := &collect[int]{}
	l := Then(From("src", Source[int](src)), "double", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return 2 * x, nil }))
	p, err := l.To("sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	for run := range 3 {
		src.i, sink.got = 0, nil
		p.Instrument = run%2 == 1
		r, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(sink.got) != 100 || sink.got[99] != 198 || r.Units != 100 {
			t.Fatalf("run %d: got %d units, report %d", run, len(sink.got), r.Units)
		}
	}
}

func TestRunConcurrently(t *testing.T) {
	checkNoLeaks(t)
	release := make(chan struct{})
	p, err := From("src", Source[int](&counter{n: 1})).To("sink", SinkFunc[int](
		func(ctx context.Context, v int) error { <-release; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := p.Run(context.Background()); done <- err }()
	for !p.running.Load() {
		time.Sleep(time.Millisecond)
	}
	if _, err := p.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestBuildErrors(t *testing.T) {
	id := StageFunc[int, int](func(ctx context.Context, x int) (int, error) { return x, nil })
	src := Source[int](&counter{n: 1})
	sink := &collect[int]{}
	tests := []struct {
		name  string
		build func() (*Pipeline, error)
		want  error
	}{
		{"nil source", func() (*Pipeline, error) { return From[int]("s", nil).To("k", sink) }, ErrNil},
		{"nil stage", func() (*Pipeline, error) {
			return Then[int, int](From("s", src), "x", nil).To("k", sink)
		}, ErrNil},
		{"nil sink", func() (*Pipeline, error) { return From("s", src).To("k", nil) }, ErrNil},
		{"size after extending", func() (*Pipeline, error) {
			l := From("s", src)
			l2 := Then(l, "a", id)
			l.Size(func(int) int { return 8 })
			return l2.To("k", sink)
		}, ErrUsed},
		{"line extended twice", func() (*Pipeline, error) {
			l := From("s", src)
			_ = Then(l, "a", id)
			return Then(l, "b", id).To("k", sink)
		}, ErrUsed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.build()
			if !errors.Is(err, tt.want) || p != nil {
				t.Fatalf("got %v, %v; want %v", p, err, tt.want)
			}
		})
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{StateDone.String(), "done"},
		{StateFailed.String(), "failed"},
		{StateStopped.String(), "stopped"},
		{StateIdle.String(), "idle"},
		{State(9).String(), "State(9)"},
		{(&StageError{Stage: "crc", Index: 2, Unit: 7, Err: errBoom}).Error(), `pipeline: stage 2 "crc", unit 7: test: boom`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestSourceErrorEOFWrapped: only an unwrapped io.EOF ends the stream.
func TestSourceWrappedEOFFails(t *testing.T) {
	checkNoLeaks(t)
	wrapped := fmt.Errorf("reading: %w", io.EOF)
	p, err := From("src", SourceFunc[int](func(ctx context.Context) (int, error) { return 0, wrapped })).
		To("sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); !errors.Is(err, wrapped) {
		t.Fatalf("Run: %v", err)
	}
}

// TestRunCancelled: a run whose context is done before it starts takes no
// unit from the source.
func TestRunCancelled(t *testing.T) {
	src := &counter{n: 10}
	p, err := From("src", Source[int](src)).To("sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := p.Run(ctx)
	if !errors.Is(err, context.Canceled) || src.i != 0 || r.Units != 0 {
		t.Fatalf("Run: %v; source gave %d, sink got %d", err, src.i, r.Units)
	}
}

// TestRunAgainAfterFailure: a run cut by a failure leaves nothing behind;
// the next run starts clean.
func TestRunAgainAfterFailure(t *testing.T) {
	fail := true
	src := &counter{n: 50}
	st := StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
		if fail && x == 10 {
			return 0, errBoom
		}
		return x, nil
	})
	sink := &collect[int]{}
	p, err := Then(From("src", Source[int](src)), "st", Stage[int, int](st)).To("sink", sink)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); !errors.Is(err, errBoom) || len(sink.got) != 10 {
		t.Fatalf("first run: %v, %d units", err, len(sink.got))
	}
	fail, src.i, sink.got = false, 0, nil
	r, err := p.Run(context.Background())
	if err != nil || len(sink.got) != 50 || sink.got[0] != 0 || sink.got[49] != 49 || r.Stages[1].State != StateDone {
		t.Fatalf("second run: %v, %d units %v", err, len(sink.got), sink.got)
	}
}
