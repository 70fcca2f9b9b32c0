// Package pipeline composes stages into a datapath, runs them, measures each
// one and hands the measurements to the cascade model (package model), as
// the NHD paper does with its front end and back end.
//
// A pipeline is a Source, any number of Stages and a Sink. Each stage takes
// one unit of work and produces one; units keep their order from source to
// sink. Each stage is connected to the one before it by a Link:
//
//   - Inline: the stage runs on the upstream stage's goroutine, one unit at
//     a time, so the two take turns (store-and-forward; the model adds their
//     times, 1/V = Σ 1/V_i: model.Series).
//   - Ring: the stage runs on its own goroutine behind a bounded ring of
//     units, so the two work at once on successive units (the model takes
//     the slowest, after the first unit has filled the pipeline: pipelined
//     with fill, model.Overlap).
//
// examples/nhd runs each host lane as a pipeline host -> bridge -> verify
// with inline links and instrumentation, and reads its latency quantiles
// from Histogram. The datapath inside a bridge (DMA streaming, read-ahead,
// write-behind) is package bridge's, not this package's.
//
// A pipeline is built with From, Then and To and run with Run:
//
//	l := pipeline.From("host", commands)                 // Source[*Cmd]
//	f := pipeline.Then(l, pipeline.Inline(), "ata", front) // Stage[*Cmd, *Cmd]
//	b := pipeline.Then(f, pipeline.Ring(8), "nbd", back)    // overlapped
//	p, err := b.Size(cmdBytes).To(pipeline.Inline(), "verify", check)
//	p.Instrument = true
//	rep, err := p.Run(ctx)
//	rep.WriteTable(os.Stdout)
//
// # Errors and cancellation
//
// The first error a stage returns stops the pipeline. Run returns it as a
// *StageError naming the stage and the unit, wrapping the stage's error for
// errors.Is and errors.As. The stages upstream of the failure stop (their
// context is cancelled, and a stage blocked on a queue wakes); the stages
// downstream finish the units already queued for them, so the sink consumes
// exactly the units before the failed one (AbortOnError stops them too).
// Cancelling Run's context stops every stage. Every goroutine Run started
// has ended when it returns, and the Report says how many units each stage
// completed and how it ended (done, failed or stopped): partial results are
// reported, not lost.
//
// # Instrumentation
//
// With Pipeline.Instrument off a stage costs one nil check per unit and no
// clock reads. On, each stage records its busy time, bytes, queue waits and
// a latency histogram (log-linear buckets, within 3.1%, allocation-free),
// and the sink records each unit's end-to-end time. The Report turns them
// into per-stage rates and shares, the model's prediction for the
// configuration beside the measured rate, and the bottleneck; it prints as
// a table (WriteTable) or JSON.
//
// # Allocation
//
// A run allocates when it starts (goroutines, contexts, its report) and not
// per unit: units travel by value through rings of a fixed size, and a
// Histogram is a fixed array.
package pipeline
