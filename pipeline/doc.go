// Package pipeline runs a chain of stages on a stream of units, measures
// each stage and hands the measurements to the cascade model (package
// model), as the NHD paper does with the nodes of its datapath.
//
// A pipeline is a Source, any number of Stages and a Sink. Each stage
// takes one unit and produces one; units keep their order from source to
// sink. The stages run on the goroutine that calls Run and take turns on
// each unit, the paper's synchronous cascade, so the model adds their
// times (formula 1, 1/V = Σ 1/V_i) and the report compares that
// prediction with the rate measured end to end.
//
// examples/nhd runs each host lane as a pipeline host -> bridge -> verify
// with instrumentation, and reads its latency quantiles from Histogram.
// The datapath inside a bridge (DMA streaming, read-ahead, write-behind)
// and its measurement against the model node by node (bridge.Measure) are
// package bridge's.
//
// A pipeline is built with From, Then and To and run with Run:
//
//	l := pipeline.From("host", commands).Size(cmdBytes) // Source[*Cmd]
//	b := pipeline.Then(l, "bridge", run).Size(cmdBytes) // Stage[*Cmd, *Cmd]
//	p, err := b.To("verify", check)                     // Sink[*Cmd]
//	p.Instrument = true
//	rep, err := p.Run(ctx)
//	rep.WriteTable(os.Stdout)
//
// # Errors and cancellation
//
// The first error a stage returns stops the pipeline. Run returns it as a
// *StageError naming the stage and the unit, wrapping the stage's error for
// errors.Is and errors.As; the sink has then consumed exactly the units
// before the failed one. Cancelling Run's context stops the run before the
// next unit (and any stage that watches the context at once); Run then
// returns context.Cause(ctx). The Report says how many units each stage
// completed and how it ended (done, failed or stopped): partial results
// are reported, not lost.
//
// # Instrumentation
//
// With Pipeline.Instrument off a stage costs one nil check per unit and no
// clock reads. On, each stage records its busy time, bytes and a latency
// histogram (log-linear buckets, within 3.1%, allocation-free), and the
// sink records each unit's end-to-end time. The Report turns them into
// per-stage rates and shares, the model's prediction beside the measured
// rate, and the bottleneck; it prints as a table (WriteTable) or JSON.
//
// # Allocation
//
// A run allocates when it starts (its report, its hook on the context) and
// not per unit, and starts no goroutine; a Histogram is a fixed array.
package pipeline
