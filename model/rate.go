package model

import (
	"fmt"
	"math"
	"time"
)

// Rate is a bandwidth in bytes per second.
//
// The paper behind nhd writes "MB/s" for 2^20 bytes per second (64 KiB in
// 4745 us is its 13.17 MB/s); MiBps and the String method follow it,
// printing "MiB/s", and MBps and In(MBPerSecond) give the decimal 10^6
// form for comparison with tools that use it.
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
	// GiBPerSecond is 2^30 bytes per second.
	GiBPerSecond Rate = 1 << 30
	// GBPerSecond is 10^9 bytes per second.
	GBPerSecond Rate = 1e9
)

// unitNames are the units In knows, by value.
var unitNames = [...]struct {
	unit Rate
	name string
}{
	{BytePerSecond, "B/s"}, {MiBPerSecond, "MiB/s"}, {MBPerSecond, "MB/s"},
	{GiBPerSecond, "GiB/s"}, {GBPerSecond, "GB/s"},
}

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

// String formats r in MiB/s (the paper's MB/s) with four significant
// digits and the unit written out, "15.26 MiB/s", whatever unit r was
// made with: a Rate is a number of bytes per second and keeps no unit. In
// prints another unit.
func (r Rate) String() string { return r.In(MiBPerSecond) }

// In formats r in unit with four significant digits and the unit's name:
// (16 * MBPerSecond).In(MBPerSecond) is "16 MB/s". unit is one of the
// unit constants (BytePerSecond, MBPerSecond, MiBPerSecond, GBPerSecond,
// GiBPerSecond); any other value formats r in B/s.
func (r Rate) In(unit Rate) string {
	for _, u := range unitNames {
		if u.unit == unit {
			return fmt.Sprintf("%.4g %s", float64(r/unit), u.name)
		}
	}
	return fmt.Sprintf("%.4g B/s", float64(r))
}

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
