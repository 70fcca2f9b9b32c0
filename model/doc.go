// Package model is the cascade bandwidth model of the NHD datapath: the
// analysis every other nhd package is measured against.
//
// A block of K bytes crossing N nodes in series, each handing it to the next
// with a synchronous protocol, sees the paper's formula 1:
//
//	1/V = 1/V_1 + 1/V_2 + ... + 1/V_N      (Series)
//
// while nodes that work at once on successive blocks run at the slowest
// node's pace, min V_i (Pipelined). Rate is a bandwidth in bytes per second;
// the paper's "MB/s" is 2^20 bytes per second (Rate.MiBps).
//
// Beyond that line the package describes nodes by cost, so the model
// answers for any block size: a Node is a sum of Terms, each a cost paid
// once per block (Once), per unit of the block (PerUnit: a per-sector
// interrupt, a per-packet cost, OnePer(7) for an ACK every 7 packets) or per
// byte (Streaming). A Cascade of nodes reports its series and pipelined
// rates, each node's Share of the time, the Bottleneck, and what speeding one
// node up does to the whole (Faster, SpeedUp, which is Amdahl's law). Overlap
// streams a block through stages in chunks: the first chunk's trip through
// all stages plus the rest at the bottleneck's pace, the paper's DMA
// streaming. FitCost fits measured (block size, time) Samples to a Cost
// (a fixed time.Duration plus bytes at a Bandwidth, the units Once and
// Streaming take) by least squares and reports the fit's error. IOPS,
// Bandwidth, Depth and Latency are Little's law for a queue of requests, and
// Cascade.AtDepth bounds a cascade's rate with several requests in flight.
//
// Nothing here moves bytes faster than free: a negative rate or cost is
// refused. NewRateNode and NewCostNode return an error wrapping
// ErrNonPhysical for one, and FitCost returns its Fit with such an error
// when the best line has a negative part; RateNode and CostNode, for
// values written in the program, panic instead, as Once does on a
// negative time. A Rate keeps no unit: String prints MiB/s, In any unit.
//
// In the NHD datapath the model stands beside the real components: the
// pipeline package measures each stage's rate, hands them to RateNode, and
// asks a Cascade to Predict the end-to-end rate and name the bottleneck.
// Subpackage paper holds the 2007 paper's inputs and printed figures.
//
// Everything here is a value with no hidden state: all functions and
// methods are safe for concurrent use, and none retains its arguments except
// NewNode and Overlap, which keep the terms and stages they are given.
package model
