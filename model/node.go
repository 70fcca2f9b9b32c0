package model

import (
	"fmt"
	"math"
	"time"
)

// Term is one cost a node pays while it moves a block: Each seconds, paid
// Count(k) times for a block of k bytes. Counts multiply out from the block
// size, so one Node answers for every block size:
//
//	Once("completion interrupt", 495*time.Microsecond)    // once per block
//	PerUnit("sector handshake", 512, 60*time.Microsecond) // once per sector
//	PerUnit("ACK out", 1448, 200*time.Microsecond).OnePer(7)
//	Streaming("IDE MDMA", 16*model.MBPerSecond)           // per byte
//
// Terms are values; the zero Term costs nothing.
type Term struct {
	// Name says what the cost is, for reports.
	Name string
	// Each is the cost of one occurrence, in seconds.
	Each float64
	// Unit is how many bytes one occurrence covers: 0 means once per block,
	// 1 once per byte, n once per n bytes with a partial unit counting whole.
	Unit int64
	// Group, when above 1, means one occurrence per Group units, rounded up
	// (an ACK for every 7 packets received).
	Group int64
}

// Once returns a cost paid once per block, whatever its size (a command
// interrupt, a request header, a process switch).
func Once(name string, d time.Duration) Term {
	return Term{Name: name, Each: nonNegative(d)}
}

// PerUnit returns a cost paid once for every unit bytes of the block, a
// partial unit counting whole (a per-sector interrupt with unit 512, a
// per-packet cost with unit 1448). It panics if unit < 1.
func PerUnit(name string, unit int64, d time.Duration) Term {
	if unit < 1 {
		panic(fmt.Sprintf("model: PerUnit %q: unit %d < 1", name, unit))
	}
	return Term{Name: name, Each: nonNegative(d), Unit: unit}
}

// Streaming returns a per-byte cost: moving the block at rate r. A rate of 0
// is a stopped node (infinite cost), +Inf a free one. It panics on a
// negative or NaN rate, as Once does on a negative cost.
func Streaming(name string, r Rate) Term {
	if err := r.check(); err != nil {
		panic(fmt.Sprintf("model: Streaming %q: %v", name, err))
	}
	return Term{Name: name, Each: r.Seconds(1), Unit: 1}
}

// OnePer returns t paid once per n of its units, rounded up: one ACK per 7
// packets is PerUnit("ACK", 1448, d).OnePer(7). It panics if n < 1 or if t is
// a once-per-block term.
func (t Term) OnePer(n int64) Term {
	if n < 1 || t.Unit == 0 {
		panic(fmt.Sprintf("model: Term %q: OnePer(%d) needs n >= 1 and a per-unit term", t.Name, n))
	}
	t.Group = n
	return t
}

// Times returns t with n occurrences where t had one (two interrupts per
// block instead of one). It panics if n < 0 or n is NaN.
func (t Term) Times(n float64) Term {
	if !(n >= 0) {
		panic(fmt.Sprintf("model: Term %q: Times(%v)", t.Name, n))
	}
	t.Each *= n
	return t
}

// Count returns how many times t is paid for a block of k bytes.
func (t Term) Count(k int64) int64 {
	if k <= 0 {
		return 0
	}
	if t.Unit <= 0 {
		return 1
	}
	c := ceilDiv(k, t.Unit)
	if t.Group > 1 {
		c = ceilDiv(c, t.Group)
	}
	return c
}

// Seconds returns what t costs for a block of k bytes.
func (t Term) Seconds(k int64) float64 {
	c := t.Count(k)
	if c == 0 {
		return 0
	}
	return float64(c) * t.Each
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func nonNegative(d time.Duration) float64 {
	if d < 0 {
		panic(fmt.Sprintf("model: negative cost %v", d))
	}
	return d.Seconds()
}

// Node is one element of a cascade: something a block crosses, with the
// time it takes described by cost Terms. A Node built by Overlap instead
// holds stages that work on the block at the same time.
//
// A Node is a value: its methods do not modify it and are safe for
// concurrent use. Do not modify Terms after handing the Node to others.
type Node struct {
	// Name says what the node is, for reports.
	Name string
	// Terms are the node's costs; the node's time for a block is their sum.
	Terms []Term

	stages []Node // set by Overlap
	chunk  int64  // Overlap's chunk size; <= 0 is cut-through
}

// NewNode returns a node whose time for a block is the sum of terms.
func NewNode(name string, terms ...Term) Node {
	return Node{Name: name, Terms: terms}
}

// NewRateNode returns a node that moves bytes at rate r and has no
// per-block cost: the form a pipeline stage's measured throughput takes. A
// rate of 0 is a stopped node, +Inf a free one; a negative or NaN rate is
// refused with an error wrapping ErrNonPhysical.
func NewRateNode(name string, r Rate) (Node, error) {
	if err := r.check(); err != nil {
		return Node{}, fmt.Errorf("%w (node %q)", err, name)
	}
	return NewNode(name, Streaming(name, r)), nil
}

// RateNode is NewRateNode for a rate the program states (a cascade
// literal): it panics where NewRateNode returns an error, as PerUnit does
// on a bad unit. Use NewRateNode for a rate that comes from data.
func RateNode(name string, r Rate) Node {
	n, err := NewRateNode(name, r)
	if err != nil {
		panic(err.Error())
	}
	return n
}

// NewCostNode returns a node with the affine cost c (a fitted node): c.Fixed
// once per block plus each byte at c.Bandwidth. A cost that Check refuses
// (a negative part, as a fit to data that are not affine can give, which
// would make the node faster than its own fixed cost allows) is refused
// with the same error, wrapping ErrNonPhysical.
func NewCostNode(name string, c Cost) (Node, error) {
	if err := c.Check(); err != nil {
		return Node{}, fmt.Errorf("%w (node %q)", err, name)
	}
	return NewNode(name, Once("per block", c.Fixed), Streaming("per byte", c.Bandwidth)), nil
}

// CostNode is NewCostNode for a cost the program states: it panics where
// NewCostNode returns an error. Use NewCostNode for a fitted cost.
func CostNode(name string, c Cost) Node {
	n, err := NewCostNode(name, c)
	if err != nil {
		panic(err.Error())
	}
	return n
}

// Overlap returns a node made of stages that work on a block at the same
// time, the block cut into chunks of chunk bytes that stream from one stage
// to the next (the paper's DMA streaming: CPU memory -> FIFO -> host at
// once). Each stage's once-per-block terms (interrupts, command decoding)
// cannot be split and are paid in series; the rest is paid per chunk, and
// the block takes the first chunk's trip through all stages plus each later
// chunk at the slowest stage's pace:
//
//	T = Σ_i F_i + Σ_i g_i(c_1) + Σ_{j>1} max_i g_i(c_j)
//
// where F_i is stage i's per-block cost and g_i(c) its other costs for a
// chunk of c bytes. With one chunk (chunk >= k) T is the stages in series;
// as chunks shrink T falls toward Σ F_i + max_i g_i(k), which for stages
// that cost only per byte is the bottleneck (Pipelined). A chunk <= 0 means
// that limit: ideal cut-through. Chunks that are not a multiple of a stage's
// unit pay that unit's cost more than once, as real hardware does.
func Overlap(name string, chunk int64, stages ...Node) Node {
	return Node{Name: name, stages: stages, chunk: chunk}
}

// Chain returns a node made of nodes in series: its time for a block is the
// sum of theirs. It lets a cascade (a front end of three parts) stand as one
// node of a larger cascade.
func Chain(name string, nodes ...Node) Node {
	return Node{Name: name, stages: nodes, chunk: math.MaxInt64}
}

// Stages returns the stages of a node built by Overlap or Chain, nil
// otherwise.
func (n Node) Stages() []Node { return n.stages }

// Seconds returns the node's time for a block of k bytes.
func (n Node) Seconds(k int64) float64 {
	if k <= 0 {
		return 0
	}
	return n.fixed() + n.flow(k)
}

// Duration returns Seconds(k) as a time.Duration (rounded to the nanosecond).
func (n Node) Duration(k int64) time.Duration {
	return seconds(n.Seconds(k))
}

// Rate returns the node's rate for blocks of k bytes.
func (n Node) Rate(k int64) Rate { return rateOf(k, n.Seconds(k)) }

// fixed is the node's once-per-block cost.
func (n Node) fixed() float64 {
	var s float64
	if n.stages != nil {
		for _, st := range n.stages {
			s += st.fixed()
		}
		return s
	}
	for _, t := range n.Terms {
		if t.Unit <= 0 {
			s += t.Each
		}
	}
	return s
}

// flow is the node's cost for k bytes other than its per-block cost: what
// a chunk of k bytes costs when it streams through.
func (n Node) flow(k int64) float64 {
	if k <= 0 {
		return 0
	}
	if n.stages == nil {
		var s float64
		for _, t := range n.Terms {
			if t.Unit > 0 {
				s += t.Seconds(k)
			}
		}
		return s
	}
	if len(n.stages) == 0 {
		return 0
	}
	maxFlow := func(c int64) float64 {
		m := 0.0
		for _, st := range n.stages {
			m = math.Max(m, st.flow(c))
		}
		return m
	}
	c := n.chunk
	if c <= 0 {
		return maxFlow(k)
	}
	if c >= k {
		c = k
	}
	var first float64
	for _, st := range n.stages {
		first += st.flow(c)
	}
	chunks := ceilDiv(k, c)
	if chunks == 1 {
		return first
	}
	last := k - (chunks-1)*c
	return first + float64(chunks-2)*maxFlow(c) + maxFlow(last)
}

// Faster returns n with every cost divided by f (f = 2: twice as fast). It
// panics unless f > 0.
func (n Node) Faster(f float64) Node {
	if !(f > 0) {
		panic(fmt.Sprintf("model: Node %q: Faster(%v) needs a factor > 0", n.Name, f))
	}
	out := Node{Name: n.Name, chunk: n.chunk}
	if n.Terms != nil {
		out.Terms = make([]Term, len(n.Terms))
		for i, t := range n.Terms {
			t.Each /= f
			out.Terms[i] = t
		}
	}
	if n.stages != nil {
		out.stages = make([]Node, len(n.stages))
		for i, st := range n.stages {
			out.stages[i] = st.Faster(f)
		}
	}
	return out
}

// seconds converts s to a Duration rounded to the nanosecond, saturating
// at the largest and smallest Durations.
func seconds(s float64) time.Duration {
	d := s * float64(time.Second)
	switch {
	case d >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case d <= math.MinInt64:
		return time.Duration(math.MinInt64)
	}
	return time.Duration(math.Round(d))
}
