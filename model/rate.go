package model

import (
	"fmt"
	"math"
	"time"
)

// Rate is a bandwidth in bytes per second.
//
// The paper behind nhd writes "MB/s" for 2^20 bytes per second (64 KiB in
// 4745 us is its 13.17 MB/s); MiBps and the String method follow it, and
// MBps gives the decimal 10^6 form for comparison with tools that use it.
//
// A Rate of 0 is a stopped node, +Inf a node that costs nothing.
type Rate float64

const (
	// BytePerSecond is the unit of Rate.
	BytePerSecond Rate = 1
	// MiBPerSecond is 2^20 bytes per second, the paper's "MB/s".
	MiBPerSecond Rate = 1 << 20
	// MBPerSecond is 10^6 bytes per second.
	MBPerSecond Rate = 1e6
)

// RateOf returns the rate of moving n bytes in d. A zero or negative d gives
// +Inf.
func RateOf(n int64, d time.Duration) Rate {
	return rateOf(n, d.Seconds())
}

// rateOf is n bytes over s seconds; s <= 0 gives +Inf, s = +Inf gives 0.
func rateOf(n int64, s float64) Rate {
	if s <= 0 {
		return Rate(math.Inf(1))
	}
	return Rate(float64(n) / s)
}

// MiBps returns r in units of 2^20 bytes per second (the paper's MB/s).
func (r Rate) MiBps() float64 { return float64(r) / float64(MiBPerSecond) }

// MBps returns r in units of 10^6 bytes per second.
func (r Rate) MBps() float64 { return float64(r) / float64(MBPerSecond) }

// Seconds returns the time r needs to move n bytes: +Inf when r <= 0, 0 when
// r is +Inf.
func (r Rate) Seconds(n int64) float64 {
	if r <= 0 {
		return math.Inf(1)
	}
	return float64(n) / float64(r)
}

// String formats r in MiB/s with four significant digits.
func (r Rate) String() string { return fmt.Sprintf("%.4g MiB/s", r.MiBps()) }

// Series returns the effective rate of nodes in series, each handing a block
// to the next with a synchronous protocol: 1/V = Σ 1/V_i (the paper's formula
// 1). A node of rate 0 (or below) stops the cascade (Series returns 0); an
// infinite rate adds nothing. With no nodes the result is +Inf.
func Series(rates ...Rate) Rate {
	var inv float64
	for _, r := range rates {
		if r <= 0 {
			return 0
		}
		inv += 1 / float64(r)
	}
	if inv == 0 {
		return Rate(math.Inf(1))
	}
	return Rate(1 / inv)
}

// Pipelined returns the rate of nodes fully overlapped (cut-through, every
// node busy at once): the bottleneck, min V_i. A negative rate counts as 0.
// With no nodes the result is +Inf.
func Pipelined(rates ...Rate) Rate {
	m := Rate(math.Inf(1))
	for _, r := range rates {
		if r < m {
			m = r
		}
	}
	if m < 0 {
		return 0
	}
	return m
}
