package model

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrNonPhysical is wrapped by the errors of NewRateNode and NewCostNode for
// a negative (or NaN) rate or cost, and by FitCost's and FitFixed's for a
// fitted line with a negative part: no node moves bytes faster than free.
var ErrNonPhysical = errors.New("model: non-physical cost or rate")

// Cost is an affine node cost: Fixed once per block, then the block's bytes
// at Bandwidth. A block of k bytes takes Fixed + k/Bandwidth. It is what
// FitCost measures and what NewCostNode turns into a node.
//
// Its parts are in the units of the package's constructors: Fixed is a
// time.Duration as in Once and PerUnit, Bandwidth a Rate as in Streaming
// and RateNode. Bandwidth +Inf is a cost with no per-byte part; 0 a node
// that never finishes, which Check refuses (use RateNode(name, 0) for a
// stopped node). Hockney's (r∞, n½) are Bandwidth and HalfBlock.
type Cost struct {
	Fixed     time.Duration // per block
	Bandwidth Rate          // the rate the bytes move at once Fixed is paid
}

// Check reports whether c is a physical cost: Fixed not negative and
// Bandwidth above 0 (possibly +Inf), else an error wrapping ErrNonPhysical
// that names the part.
func (c Cost) Check() error {
	if c.Fixed < 0 {
		return fmt.Errorf("%w: fixed cost %v below zero", ErrNonPhysical, c.Fixed)
	}
	if !(c.Bandwidth > 0) {
		return fmt.Errorf("%w: bandwidth %v (per-byte cost %.4g ns) not above zero", ErrNonPhysical, c.Bandwidth, 1e9*c.SecondsPerByte())
	}
	return nil
}

// check reports whether r is a physical rate: not negative, not NaN.
func (r Rate) check() error {
	if !(r >= 0) {
		return fmt.Errorf("%w: rate %v", ErrNonPhysical, r)
	}
	return nil
}

// SecondsPerByte returns 1/Bandwidth: the per-byte part of the cost, the
// slope of the line (0 for a Bandwidth of +Inf, negative for a negative
// Bandwidth, as Sub can give).
func (c Cost) SecondsPerByte() float64 { return 1 / float64(c.Bandwidth) }

// Seconds returns c's time for a block of k bytes.
func (c Cost) Seconds(k int64) float64 { return c.Fixed.Seconds() + c.SecondsPerByte()*float64(k) }

// Rate returns c's rate for blocks of k bytes.
func (c Cost) Rate(k int64) Rate { return rateOf(k, c.Seconds(k)) }

// Asymptote returns the rate c approaches for very large blocks: Bandwidth
// when it is above 0, else +Inf.
func (c Cost) Asymptote() Rate {
	if c.Bandwidth <= 0 {
		return Rate(math.Inf(1))
	}
	return c.Bandwidth
}

// HalfBlock returns the block size at which the fixed part equals the
// per-byte part, so the node reaches half its asymptotic rate (Hockney's
// n½): Fixed·Bandwidth bytes, +Inf for a Bandwidth not above 0.
func (c Cost) HalfBlock() float64 {
	if c.Bandwidth <= 0 || math.IsInf(float64(c.Bandwidth), 1) {
		return math.Inf(1)
	}
	return c.Fixed.Seconds() * float64(c.Bandwidth)
}

// Sub returns c - d part by part, the per-byte parts subtracted as
// 1/Bandwidth: the overhead of one node over another (NBD over raw TCP).
// The difference need not be physical: a part where c is cheaper than d
// comes out negative (a negative Bandwidth), which Check reports.
func (c Cost) Sub(d Cost) Cost {
	return Cost{Fixed: c.Fixed - d.Fixed, Bandwidth: Rate(1 / (c.SecondsPerByte() - d.SecondsPerByte()))}
}

// String formats c as "1660.6 µs + 3.378 MiB/s": the fixed part, then the
// bandwidth (Rate.String).
func (c Cost) String() string {
	return fmt.Sprintf("%.1f µs + %v", float64(c.Fixed)/float64(time.Microsecond), c.Bandwidth)
}
