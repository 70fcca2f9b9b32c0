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

// genLink draws any link for int units.
func genLink(t *rapid.T, label string) Link {
	c := rapid.IntRange(1, 9).Draw(t, label+" capacity")
	if rapid.Bool().Draw(t, label) {
		return Ring(c)
	}
	return Inline()
}

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

// genUnitLink draws any link for units.
func genUnitLink(t *rapid.T, label string) Link {
	c := rapid.IntRange(1, 9).Draw(t, label+" capacity")
	if rapid.Bool().Draw(t, label) {
		return Ring(c)
	}
	return Inline()
}

// TestPropertyOutputs: any mix of inline and overlapped links
// produces the outputs of composing the stage functions directly, in order;
// a failure at stage f on unit k leaves every stage's count, state and the
// sink's output exactly as the contract says.
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
			l = Then(l, genUnitLink(t, "link"), name, Stage[unit, unit](f))
		}
		sink := &unitSink{failAt: -1}
		p, err := l.To(genUnitLink(t, "sink link"), "sink", sink)
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
		// starts clean whatever the last one left in its queues.
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
			p.AbortOnError = rapid.Bool().Draw(t, "abort on error")
			r, err := p.Run(context.Background())
			checkRun(t, r, err, want, sink.got, fail, failAt, p.AbortOnError)
		}
	})
}

// checkRun checks one run of TestPropertyOutputs against the contract.
func checkRun(t *rapid.T, r Report, err error, want, got []int, fail, failAt int, abort bool) {
	n := len(want)
	failed := fail >= 0 && failAt < n
	if !failed {
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
	// Every unit a stage completed was taken by the next one or reported
	// dropped: none is lost from the report.
	for i := 0; i+1 < len(r.Stages); i++ {
		taken := r.Stages[i+1].Units + r.Stages[i+1].Dropped
		if i+1 == fail {
			taken++
		}
		if r.Stages[i].Units != r.Stages[i+1].Units+r.Stages[i].Dropped+b2u(i+1 == fail) {
			t.Fatalf("stage %d: %d units, %d dropped, next took %d", i, r.Stages[i].Units, r.Stages[i].Dropped, taken)
		}
	}
	if !abort {
		// Draining, nothing is dropped after the failed stage.
		for i := fail; i < len(r.Stages); i++ {
			if r.Stages[i].Dropped != 0 {
				t.Fatalf("stage %d after the failure dropped %d", i, r.Stages[i].Dropped)
			}
		}
	}
	if abort {
		// Everything stops: the sink saw a prefix of the stream before
		// the failed unit.
		if len(got) > failAt {
			t.Fatalf("sink got %d units after a failure at unit %d", len(got), failAt)
		}
		if diff := cmp.Diff(want[:len(got)], got, cmpEmpty); diff != "" {
			t.Fatalf("outputs (-want +got):\n%s", diff)
		}
		if r.Stages[fail].State != StateFailed || r.Stages[fail].Err != errBoom.Error() {
			t.Fatalf("failed stage: %+v", r.Stages[fail])
		}
		return
	}
	// Drain: the units before the failed one all reach the sink.
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
			if (s.State != StateDone && s.State != StateStopped) || s.Units < uint64(failAt) || s.Err != "" {
				t.Fatalf("stage %d before the failure: %+v", i, s)
			}
		}
	}
	if r.Units != uint64(failAt) {
		t.Fatalf("report: %d units, want %d", r.Units, failAt)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
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

// linkMakers returns a maker of fresh links of each kind for int units.
func linkMakers(capacity int) []func() Link {
	return []func() Link{
		Inline,
		func() Link { return Ring(capacity) },
	}
}

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
	for _, mk := range linkMakers(4) {
		link := mk()
		t.Run(link.String(), func(t *testing.T) {
			checkNoLeaks(t)
			started := make(chan struct{}, 1)
			src := &counter{n: 1 << 30}
			l := Then(From("src", Source[int](src)), mk(), "busy", StageFunc[int, int](
				func(ctx context.Context, x int) (int, error) { return x, nil }))
			l = Then(l, mk(), "stuck", blockUntilDone(started))
			sink := &collect[int]{}
			p, err := l.To(mk(), "sink", sink)
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
				if s.State != StateStopped {
					t.Errorf("stage %q: %v, want stopped", s.Name, s.State)
				}
			}
			if r.Stages[2].Units != 0 || len(sink.got) != 0 {
				t.Errorf("stuck stage completed %d units, sink %d", r.Stages[2].Units, len(sink.got))
			}
		})
	}
}

// TestFailureUnblocksStuckStages: a failure downstream stops an upstream
// stage that waits on its context, and a stage blocked on a full queue.
func TestFailureUnblocksStuckStages(t *testing.T) {
	for _, mk := range linkMakers(2)[1:] {
		t.Run(mk().String(), func(t *testing.T) {
			checkNoLeaks(t)
			started := make(chan struct{}, 1)
			// src -> stuck (waits on ctx after unit 0) ; sink fails at once.
			stuck := StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
				if x == 0 {
					return x, nil
				}
				return blockUntilDone(started)(ctx, x)
			})
			l := Then(From("src", Source[int](&counter{n: 1 << 30})), mk(), "stuck", Stage[int, int](stuck))
			p, err := l.To(mk(), "sink", SinkFunc[int](func(ctx context.Context, v int) error {
				<-started // fail only once the stage upstream is stuck
				return errBoom
			}))
			if err != nil {
				t.Fatal(err)
			}
			r, err := p.Run(context.Background())
			var se *StageError
			if !errors.As(err, &se) || se.Index != 2 || se.Unit != 0 || !errors.Is(err, errBoom) {
				t.Fatalf("Run: %v", err)
			}
			want := []State{StateStopped, StateStopped, StateFailed}
			for i, s := range r.Stages {
				if s.State != want[i] {
					t.Errorf("stage %q: %v, want %v", s.Name, s.State, want[i])
				}
			}
		})
	}
}

// TestDeadline: a run stopped by its context's deadline reports it.
func TestDeadline(t *testing.T) {
	checkNoLeaks(t)
	l := Then(From("src", Source[int](&counter{n: 1 << 40})), Ring(16), "id", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return x, nil }))
	sink := &collect[int]{}
	p, err := l.To(Ring(16), "sink", SinkFunc[int](func(ctx context.Context, v int) error {
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
	l := Then(From("src", Source[int](src)), Ring(4), "double", StageFunc[int, int](
		func(ctx context.Context, x int) (int, error) { return 2 * x, nil }))
	p, err := l.To(Ring(3), "sink", sink)
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
	p, err := From("src", Source[int](&counter{n: 1})).To(Inline(), "sink", SinkFunc[int](
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
		{"nil source", func() (*Pipeline, error) { return From[int]("s", nil).To(Inline(), "k", sink) }, ErrNil},
		{"nil stage", func() (*Pipeline, error) {
			return Then[int, int](From("s", src), Inline(), "x", nil).To(Inline(), "k", sink)
		}, ErrNil},
		{"nil sink", func() (*Pipeline, error) { return From("s", src).To(Inline(), "k", nil) }, ErrNil},
		{"ring 0", func() (*Pipeline, error) { return From("s", src).To(Ring(0), "k", sink) }, ErrLink},
		{"ring -1", func() (*Pipeline, error) { return Then(From("s", src), Ring(-1), "x", id).To(Inline(), "k", sink) }, ErrLink},
		{"size after extending", func() (*Pipeline, error) {
			l := From("s", src)
			l2 := Then(l, Inline(), "a", id)
			l.Size(func(int) int { return 8 })
			return l2.To(Inline(), "k", sink)
		}, ErrUsed},
		{"line extended twice", func() (*Pipeline, error) {
			l := From("s", src)
			_ = Then(l, Inline(), "a", id)
			return Then(l, Inline(), "b", id).To(Inline(), "k", sink)
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
		{Inline().String(), "inline"},
		{Ring(64).String(), "ring(64)"},
		{StateDone.String(), "done"},
		{StateFailed.String(), "failed"},
		{StateStopped.String(), "stopped"},
		{StateIdle.String(), "idle"},
		{State(9).String(), "State(9)"},
		{LinkRing.String(), "ring"},
		{LinkKind(9).String(), "LinkKind(9)"},
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
		To(Ring(1), "sink", &collect[int]{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); !errors.Is(err, wrapped) {
		t.Fatalf("Run: %v", err)
	}
}

// TestQueueWaits: a slow sink behind a full ring makes the stage before it
// wait for room; a slow source makes the stage after its link wait for
// input. Both waits are counted, for each kind of overlapped link.
func TestQueueWaits(t *testing.T) {
	checkNoLeaks(t)
	slow := func() { time.Sleep(200 * time.Microsecond) }
	for _, mk := range linkMakers(1)[1:] {
		// slow sink: the source waits for room
		p, err := From("src", Source[int](&counter{n: 20})).To(mk(), "sink", SinkFunc[int](
			func(ctx context.Context, v int) error { slow(); return nil }))
		if err != nil {
			t.Fatal(err)
		}
		p.Instrument = true
		r, err := p.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r.Stages[0].WaitOut <= 0 || r.Stages[1].Busy < 20*200*time.Microsecond {
			t.Errorf("%v, slow sink: source waited %v, sink busy %v", r.Stages[1].Link, r.Stages[0].WaitOut, r.Stages[1].Busy)
		}
		// Units wait in the full link for the slow sink: at least the
		// sink's time for the unit ahead, for all but the first.
		if r.Stages[1].Queued < 19*200*time.Microsecond {
			t.Errorf("%v, slow sink: units queued %v in all", r.Stages[1].Link, r.Stages[1].Queued)
		}
		// slow source: the sink waits for input
		c := &counter{n: 20}
		p, err = From("src", SourceFunc[int](func(ctx context.Context) (int, error) { slow(); return c.Next(ctx) })).
			To(mk(), "sink", &collect[int]{})
		if err != nil {
			t.Fatal(err)
		}
		p.Instrument = true
		if r, err = p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.Stages[1].WaitIn <= 0 {
			t.Errorf("%v, slow source: sink waited %v", r.Stages[1].Link, r.Stages[1].WaitIn)
		}
	}
}

// TestRunCancelled: a run whose context is done before it starts takes no
// unit from the source.
func TestRunCancelled(t *testing.T) {
	checkNoLeaks(t)
	for _, mk := range linkMakers(2) {
		src := &counter{n: 10}
		p, err := From("src", Source[int](src)).To(mk(), "sink", &collect[int]{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Run(canceledCtx())
		if !errors.Is(err, context.Canceled) || src.i != 0 || r.Units != 0 {
			t.Fatalf("%v: Run: %v; source gave %d, sink got %d", mk(), err, src.i, r.Units)
		}
	}
}

// TestRunAgainAfterFailure: a run cut by a failure leaves units in its
// queues; the next run starts clean.
func TestRunAgainAfterFailure(t *testing.T) {
	checkNoLeaks(t)
	for _, mk := range linkMakers(4) {
		fail := true
		src := &counter{n: 50}
		st := StageFunc[int, int](func(ctx context.Context, x int) (int, error) {
			if fail && x == 10 {
				return 0, errBoom
			}
			return x, nil
		})
		sink := &collect[int]{}
		p, err := Then(From("src", Source[int](src)), mk(), "st", Stage[int, int](st)).To(mk(), "sink", sink)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Run(context.Background()); !errors.Is(err, errBoom) || len(sink.got) != 10 {
			t.Fatalf("%v: first run: %v, %d units", mk(), err, len(sink.got))
		}
		fail, src.i, sink.got = false, 0, nil
		r, err := p.Run(context.Background())
		if err != nil || len(sink.got) != 50 || sink.got[0] != 0 || sink.got[49] != 49 || r.Stages[1].State != StateDone {
			t.Fatalf("%v: second run: %v, %d units %v", mk(), err, len(sink.got), sink.got)
		}
	}
}
