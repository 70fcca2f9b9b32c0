package pipeline

import (
	"context"
	"errors"
	"fmt"
)

// Source produces the units of work that enter a pipeline.
//
// Next returns the next unit, or io.EOF (unwrapped) when there are no more;
// any other error stops the pipeline. Next is called from one goroutine at a
// time and must return promptly once ctx is done. A unit handed on belongs
// to the pipeline until the sink has consumed it, before Next is called
// again: a source may reuse one buffer for every unit.
type Source[T any] interface {
	Next(ctx context.Context) (T, error)
}

// Stage turns one unit of work into one unit for the next stage.
//
// Process is called from one goroutine at a time, on units in stream order,
// and must return promptly once ctx is done. A non-nil error stops the
// pipeline: the unit is not handed on and the error is reported, wrapped in
// a *StageError. Process must not retain in after it returns unless in is
// its own.
type Stage[In, Out any] interface {
	Process(ctx context.Context, in In) (Out, error)
}

// Sink consumes the units that leave a pipeline.
//
// Consume is called from one goroutine at a time, on units in stream order;
// a non-nil error stops the pipeline. Consume must not retain v after it
// returns unless v is its own (see Stage).
type Sink[T any] interface {
	Consume(ctx context.Context, v T) error
}

// SourceFunc adapts a function to Source.
type SourceFunc[T any] func(ctx context.Context) (T, error)

// Next calls f(ctx).
func (f SourceFunc[T]) Next(ctx context.Context) (T, error) { return f(ctx) }

// StageFunc adapts a function to Stage.
type StageFunc[In, Out any] func(ctx context.Context, in In) (Out, error)

// Process calls f(ctx, in).
func (f StageFunc[In, Out]) Process(ctx context.Context, in In) (Out, error) { return f(ctx, in) }

// SinkFunc adapts a function to Sink.
type SinkFunc[T any] func(ctx context.Context, v T) error

// Consume calls f(ctx, v).
func (f SinkFunc[T]) Consume(ctx context.Context, v T) error { return f(ctx, v) }

// Errors returned when a pipeline is built or run wrongly. Build errors are
// returned by To, wrapped with the stage's name.
var (
	// ErrNil reports a nil Source, Stage or Sink.
	ErrNil = errors.New("pipeline: nil source, stage or sink")
	// ErrUsed reports a Line extended twice: a Line is a builder for one
	// straight pipeline, and a branch would leave a stage without input.
	ErrUsed = errors.New("pipeline: line already extended")
	// ErrRunning is returned by Run while another Run of the same pipeline
	// is in progress.
	ErrRunning = errors.New("pipeline: already running")
)

// StageError is the error that stopped a pipeline: the stage that returned
// it, and the unit it was working on.
type StageError struct {
	Stage string // the stage's name
	Index int    // the stage's position: 0 is the source, the sink is last
	Unit  uint64 // the unit's position in the stream, from 0
	Err   error  // what the stage returned
}

func (e *StageError) Error() string {
	return fmt.Sprintf("pipeline: stage %d %q, unit %d: %v", e.Index, e.Stage, e.Unit, e.Err)
}

// Unwrap returns the stage's error.
func (e *StageError) Unwrap() error { return e.Err }

// State is how a stage ended a run.
type State uint8

const (
	// StateIdle: the stage has not run.
	StateIdle State = iota
	// StateDone: the stage saw the end of its input (the source's io.EOF,
	// or a failure upstream) and handed on every unit it took.
	StateDone
	// StateFailed: the stage returned an error that stopped the pipeline.
	StateFailed
	// StateStopped: the stage was stopped before the end of its input, by
	// the run's context or by a failure downstream.
	StateStopped
)

var stateNames = [...]string{"idle", "done", "failed", "stopped"}

// String returns "idle", "done", "failed" or "stopped".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText returns String's text, so reports print states by name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a state's name, so a JSON report reads back.
func (s *State) UnmarshalText(b []byte) error {
	for i, name := range stateNames {
		if string(b) == name {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("pipeline: unknown state %q", b)
}
