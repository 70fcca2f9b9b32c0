package model

import (
	"fmt"
	"math"
)

// Cascade is a chain of nodes a block crosses in order. Each method takes the
// block size k in bytes, since nodes with per-block costs are faster on big
// blocks than on small ones.
//
// A Cascade is a value: its methods do not modify it and are safe for
// concurrent use.
type Cascade []Node

// Seconds returns the time a k-byte block takes through the nodes in series
// (each hands the block on with a synchronous protocol): Σ T_i(k).
func (c Cascade) Seconds(k int64) float64 {
	var s float64
	for _, n := range c {
		s += n.Seconds(k)
	}
	return s
}

// Series returns the rate of the nodes in series for k-byte blocks: the
// paper's formula 1, 1/V = Σ 1/V_i, with each V_i taken at block size k.
func (c Cascade) Series(k int64) Rate { return rateOf(k, c.Seconds(k)) }

// Pipelined returns the steady-state rate when the nodes run in parallel
// on successive blocks (the paper's future work: front end on one block
// while the back end fetches the next): the slowest node's rate at k.
func (c Cascade) Pipelined(k int64) Rate {
	r := Rate(math.Inf(1))
	for _, n := range c {
		r = min(r, n.Rate(k))
	}
	return r
}

// PipelinedFill returns the rate of one k-byte block streamed through the
// nodes in chunks of chunk bytes: Overlap's fill formula. It lies between
// Series (one chunk) and Pipelined (many small chunks, nodes that cost only
// per byte) when chunk is a multiple of every node's unit.
func (c Cascade) PipelinedFill(k, chunk int64) Rate {
	return Overlap("", chunk, c...).Rate(k)
}

// AtDepth returns the best rate depth requests in flight can reach on the
// cascade with k-byte blocks: each request still takes the series time T,
// so at most depth·k/T (Little's law), and no more than the bottleneck
// node allows: min(depth·k/T, Pipelined). depth 1 is Series.
func (c Cascade) AtDepth(k int64, depth int) Rate {
	if depth < 1 {
		return 0
	}
	return min(Rate(float64(depth))*c.Series(k), c.Pipelined(k))
}

// Share is one node's part of a cascade's time for a block.
type Share struct {
	Index    int     // position in the cascade; -1 for none
	Name     string  // the node's name
	Seconds  float64 // the node's time for the block
	Rate     Rate    // the node's rate on its own
	Fraction float64 // Seconds over the cascade's total, in [0, 1]
}

// String formats s as "name 12.3% (4096 µs, 15.26 MiB/s)".
func (s Share) String() string {
	return fmt.Sprintf("%s %.1f%% (%.0f µs, %v)", s.Name, 100*s.Fraction, s.Seconds*1e6, s.Rate)
}

// Shares returns each node's share of the series time for a k-byte block,
// in cascade order. Fractions sum to 1 (all 0 when the total is 0; stopped
// nodes, of rate 0, share it all when there are any).
func (c Cascade) Shares(k int64) []Share {
	out := make([]Share, len(c))
	var total float64
	stopped := 0 // nodes of infinite time share the whole time equally
	for i, n := range c {
		s := n.Seconds(k)
		total += s
		if math.IsInf(s, 1) {
			stopped++
		}
		out[i] = Share{Index: i, Name: n.Name, Seconds: s, Rate: rateOf(k, s)}
	}
	for i := range out {
		switch {
		case stopped > 0:
			if math.IsInf(out[i].Seconds, 1) {
				out[i].Fraction = 1 / float64(stopped)
			}
		case total > 0:
			out[i].Fraction = out[i].Seconds / total
		}
	}
	return out
}

// Bottleneck returns the node that takes longest on a k-byte block: the
// largest share in series and the limit when pipelined. The first wins a
// tie; an empty cascade gives Index -1.
func (c Cascade) Bottleneck(k int64) Share {
	best := Share{Index: -1}
	for _, s := range c.Shares(k) {
		if best.Index < 0 || s.Seconds > best.Seconds {
			best = s
		}
	}
	return best
}

// Faster returns a copy of c with node i's costs divided by f. It panics if
// i is out of range or f is not above 0.
func (c Cascade) Faster(i int, f float64) Cascade {
	out := make(Cascade, len(c))
	copy(out, c)
	out[i] = c[i].Faster(f)
	return out
}

// SpeedUp returns how much faster the series becomes for k-byte blocks when
// node i is f times faster: new rate over old. For a cascade it equals
// Amdahl(share of node i, f).
func (c Cascade) SpeedUp(k int64, i int, f float64) float64 {
	return float64(c.Faster(i, f).Series(k) / c.Series(k))
}

// Amdahl returns the overall speed-up when a part taking fraction of the
// time becomes factor times faster: 1 / ((1-fraction) + fraction/factor).
func Amdahl(fraction, factor float64) float64 {
	return 1 / ((1 - fraction) + fraction/factor)
}

// Prediction is what a cascade predicts for one block size.
type Prediction struct {
	Block      int64   // block size in bytes
	Seconds    float64 // series time for one block
	Series     Rate    // nodes in series (synchronous hand-off)
	Pipelined  Rate    // nodes on successive blocks at once
	Shares     []Share // each node's part of the series time
	Bottleneck Share   // the slowest node
}

// Predict returns the cascade's series and pipelined rates, each node's
// share and the bottleneck for k-byte blocks in one call: what a pipeline
// of measured stages asks of the model.
func (c Cascade) Predict(k int64) Prediction {
	p := Prediction{Block: k, Shares: c.Shares(k), Bottleneck: Share{Index: -1}, Pipelined: Rate(math.Inf(1))}
	for _, s := range p.Shares {
		p.Seconds += s.Seconds
		if p.Bottleneck.Index < 0 || s.Seconds > p.Bottleneck.Seconds {
			p.Bottleneck = s
			p.Pipelined = s.Rate
		}
	}
	p.Series = rateOf(k, p.Seconds)
	return p
}
